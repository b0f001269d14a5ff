package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/internal/harness/child"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
	binDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// binary builds the bucketgrid command once per test run (without the race
// detector: Olric itself races with memberlist while members come and go),
// or returns $BUCKETGRID_BIN when set: a binary built beforehand, so that a
// benchmark can compare two builds in one session.
func binary(t testing.TB) string {
	t.Helper()
	if bin := os.Getenv("BUCKETGRID_BIN"); bin != "" {
		return bin
	}
	binOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "bucketgrid-bin"); binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "bucketgrid")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// proc is a bucketgrid instance in a process of its own.
type proc struct {
	grpcAddr, httpAddr, member string
	members                    string // members= of the ready line
	debugAddr                  string // with -debug-addr
	gossip                     string // the member's gossip address, for -grid-peers
	*child.Process
}

// startProc starts an instance whose grid member binds port (and the two
// after it), joining peers, with the extra flags.
func startProc(t testing.TB, port int, peers []string, extra ...string) *proc {
	t.Helper()
	args := append([]string{"-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0",
		"-grid-bind", fmt.Sprintf("127.0.0.1:%d", port), "-shutdown-grace", "2s", "-drain-grace", "0"}, extra...)
	for _, p := range peers {
		args = append(args, "-grid-peers", p)
	}
	cmd := exec.Command(binary(t), args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{Process: child.Start(t, cmd), gossip: fmt.Sprintf("127.0.0.1:%d", port+2)}
	t.Cleanup(func() { p.stop(t) })
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case ready <- sc.Text():
			default:
			}
		}
	}()
	select {
	case line := <-ready:
		p.grpcAddr, p.httpAddr, p.member = field(line, "grpc="), field(line, "http="), field(line, "member=")
		p.debugAddr, p.members = field(line, "debug="), field(line, "members=")
	case <-p.Exited():
		t.Fatalf("bucketgrid exited at start:\n%s", p.Out.String())
	case <-time.After(90 * time.Second):
		t.Fatalf("bucketgrid not ready after 90s:\n%s", p.Out.String())
	}
	return p
}

// stop shuts the instance down gracefully (SIGTERM), killing it if it does
// not exit within 30 s.
func (p *proc) stop(t testing.TB) {
	if !p.Stop(30 * time.Second) {
		t.Errorf("bucketgrid did not stop within 30s of SIGTERM:\n%s", p.Out.String())
	}
}

// startCluster starts n instances that form one grid.
func startCluster(t testing.TB, n int, extra ...string) []*proc {
	t.Helper()
	procs := []*proc{startProc(t, gridPort(t), nil, extra...)}
	for len(procs) < n {
		procs = append(procs, startProc(t, gridPort(t), []string{procs[0].gossip}, extra...))
	}
	return procs
}
