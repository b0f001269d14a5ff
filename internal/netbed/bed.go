package netbed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Subnet is the private network of every bed: host i has address
// 10.99.0.(11+i). Beds never share a bridge, so several may exist at once.
const Subnet = "10.99.0.0/24"

// Bed is a set of hosts on one bridge. Its methods fail the test on error.
type Bed struct {
	t     testing.TB
	tag   string // prefix of every namespace name, "bgn<pid>-<seq>"
	sw    string // the switch namespace
	Hosts []*Host

	mu      sync.Mutex
	procs   []*Proc
	proxies []*Proxy
	bridges int // bridges br1..brN created by Partition so far
}

// Host is one namespace on the bed.
type Host struct {
	bed   *Bed
	Index int
	// NS is the network namespace's name (ip netns).
	NS string
	// Addr is the host's IPv4 address.
	Addr string
	port string // the switch side of its link
}

var beds atomic.Int64

// tagRE matches the namespaces beds create: bgn<pid>-<seq>-<role>.
var tagRE = regexp.MustCompile(`^bgn(\d+)-\d+-`)

// New creates a bed of n hosts (1 ≤ n ≤ 200) and registers its removal
// with t.Cleanup. Without the privileges to create namespaces it fails the
// test when CI is set and skips it otherwise.
func New(t testing.TB, n int) *Bed {
	t.Helper()
	if n < 1 || n > 200 {
		t.Fatalf("netbed: %d hosts", n)
	}
	if err := usable(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("netbed: network namespaces are needed and CI is set: %v", err)
		}
		t.Skipf("netbed: network namespaces unavailable (%v); set CI to make this a failure", err)
	}
	removeStale(t)
	b := &Bed{t: t, tag: fmt.Sprintf("bgn%d-%d", os.Getpid(), beds.Add(1))}
	b.sw = b.tag + "-sw"
	t.Cleanup(b.close)
	b.must("netns", "add", b.sw)
	b.must("-n", b.sw, "link", "add", "br0", "type", "bridge")
	b.must("-n", b.sw, "link", "set", "br0", "up")
	for i := range n {
		h := &Host{bed: b, Index: i, NS: fmt.Sprintf("%s-h%d", b.tag, i), Addr: fmt.Sprintf("10.99.0.%d", 11+i), port: fmt.Sprintf("p%d", i)}
		b.must("netns", "add", h.NS)
		b.must("-n", b.sw, "link", "add", h.port, "type", "veth", "peer", "name", "eth0", "netns", h.NS)
		b.must("-n", b.sw, "link", "set", h.port, "master", "br0")
		b.must("-n", b.sw, "link", "set", h.port, "up")
		b.must("-n", h.NS, "addr", "add", h.Addr+"/24", "dev", "eth0")
		b.must("-n", h.NS, "link", "set", "eth0", "up")
		b.must("-n", h.NS, "link", "set", "lo", "up")
		b.Hosts = append(b.Hosts, h)
	}
	return b
}

// usable reports why namespaces cannot be made here, or nil.
func usable() error {
	if os.Geteuid() != 0 {
		return errors.New("not root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return err
	}
	return nil
}

// ip runs ip(8) with args.
func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

func (b *Bed) must(args ...string) {
	b.t.Helper()
	if err := ip(args...); err != nil {
		b.t.Fatalf("netbed: %v", err)
	}
}

// namespaces lists the network namespaces of the machine.
func namespaces() []string {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return nil
	}
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			names = append(names, f[0])
		}
	}
	return names
}

// removeStale removes the namespaces (and their processes) of beds whose
// test process no longer runs: leftovers of a run that crashed or was
// killed before its cleanup.
func removeStale(t testing.TB) {
	for _, ns := range namespaces() {
		m := tagRE.FindStringSubmatch(ns)
		if m == nil {
			continue
		}
		pid, _ := strconv.Atoi(m[1])
		if pid == os.Getpid() || alive(pid) {
			continue
		}
		killNamespace(ns)
		if err := ip("netns", "del", ns); err != nil {
			t.Logf("netbed: removing a stale namespace: %v", err)
		}
	}
}

// alive reports whether a process with this PID exists.
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// killNamespace kills, by PID, every process running in namespace ns.
func killNamespace(ns string) {
	out, err := exec.Command("ip", "netns", "pids", ns).Output()
	if err != nil {
		return
	}
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 1 && pid != os.Getpid() {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// close stops what the bed started and removes its namespaces.
func (b *Bed) close() {
	b.mu.Lock()
	procs, proxies := b.procs, b.proxies
	b.procs, b.proxies = nil, nil
	b.mu.Unlock()
	for _, p := range proxies {
		p.Close()
	}
	for _, p := range procs {
		p.Kill()
		p.Wait()
	}
	for _, h := range b.Hosts {
		killNamespace(h.NS)
	}
	for _, ns := range append(b.nsNames(), b.sw) {
		if err := ip("netns", "del", ns); err != nil {
			b.t.Errorf("netbed: %v", err)
		}
	}
}

func (b *Bed) nsNames() []string {
	var names []string
	for _, h := range b.Hosts {
		names = append(names, h.NS)
	}
	return names
}

// Partition splits the network: each group of hosts is moved to a bridge
// of its own; hosts in no group stay on the main bridge together. Frames
// between sides are dropped silently. Calling Partition again replaces the
// previous split.
func (b *Bed) Partition(groups ...[]*Host) {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.bridges < len(groups) {
		b.bridges++
		br := fmt.Sprintf("br%d", b.bridges)
		b.must("-n", b.sw, "link", "add", br, "type", "bridge")
		b.must("-n", b.sw, "link", "set", br, "up")
	}
	side := map[*Host]int{}
	for g, hosts := range groups {
		for _, h := range hosts {
			side[h] = g + 1
		}
	}
	for _, h := range b.Hosts {
		b.must("-n", b.sw, "link", "set", h.port, "master", fmt.Sprintf("br%d", side[h]))
	}
}

// Heal puts every host back on the main bridge.
func (b *Bed) Heal() {
	b.t.Helper()
	b.Partition()
}

// Cut isolates h from every other host (a partition of one).
func (h *Host) Cut() {
	h.bed.t.Helper()
	h.bed.Partition([]*Host{h})
}

// LinkDown sets h's link down: its peers get "unreachable" at once, unlike
// a partition, where frames are lost silently.
func (h *Host) LinkDown() {
	h.bed.t.Helper()
	h.bed.must("-n", h.NS, "link", "set", "eth0", "down")
}

// LinkUp sets h's link up again.
func (h *Host) LinkUp() {
	h.bed.t.Helper()
	h.bed.must("-n", h.NS, "link", "set", "eth0", "up")
}

// Command returns a command that runs name with args on h. Start it with
// Bed.Start, which tracks and removes it.
func (h *Host) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", h.NS, name}, args...)...)
}

// Proc is a process the bed started.
type Proc struct {
	Cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Start starts cmd (from Host.Command) and tracks it: it is killed when the
// test ends if it still runs. ip netns exec replaces itself with the
// program, so the PID is the program's own.
func (b *Bed) Start(cmd *exec.Cmd) *Proc {
	b.t.Helper()
	if err := cmd.Start(); err != nil {
		b.t.Fatalf("netbed: %v", err)
	}
	p := &Proc{Cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	b.mu.Lock()
	b.procs = append(b.procs, p)
	b.mu.Unlock()
	return p
}

// Pid returns the process's ID.
func (p *Proc) Pid() int { return p.Cmd.Process.Pid }

// signal sends sig unless the process has ended.
func (p *Proc) signal(sig syscall.Signal) error {
	select {
	case <-p.done:
		return os.ErrProcessDone
	default:
	}
	return syscall.Kill(p.Pid(), sig)
}

// Stop pauses the process (SIGSTOP).
func (p *Proc) Stop() error { return p.signal(syscall.SIGSTOP) }

// Cont resumes a paused process (SIGCONT).
func (p *Proc) Cont() error { return p.signal(syscall.SIGCONT) }

// Kill crashes the process (SIGKILL): no cleanup, no goodbye.
func (p *Proc) Kill() error { return p.signal(syscall.SIGKILL) }

// Wait waits for the process to end and returns what exec.Cmd.Wait did.
func (p *Proc) Wait() error {
	<-p.done
	return p.err
}

// Done is closed when the process has ended.
func (p *Proc) Done() <-chan struct{} { return p.done }

// WaitTimeout waits up to d for the process to end; it reports whether it
// did.
func (p *Proc) WaitTimeout(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}
