package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/examples/internal/ports"
	"github.com/bucketgrid/bucketgrid/grid/olric"
	"github.com/bucketgrid/bucketgrid/internal/harness/child"
)

// TestSIGTERMLeavesTheGrid builds the quick start, starts it, joins it
// with a member in this process, sends the built binary SIGTERM and checks
// that it answered requests until then, left the grid gracefully (exit
// status 0 after Shutdown returned) and that the other member saw it go.
func TestSIGTERMLeavesTheGrid(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "cluster")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	base := ports.Triples(t, 2)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	httpAddr := l.Addr().String()
	l.Close()

	p := child.Start(t, exec.Command(bin, "-port", fmt.Sprint(base[0]), "-http", httpAddr))
	logs := p.Out

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	poll(ctx, t, logs, "the API answers", func() bool {
		r, err := http.Get("http://" + httpAddr + "/api/x")
		if err != nil {
			return false
		}
		r.Body.Close()
		return r.StatusCode == http.StatusOK
	})

	cfg := olric.DefaultLocalConfig()
	cfg.BindPort = base[1]
	cfg.Peers = []string{fmt.Sprintf("127.0.0.1:%d", base[0]+2)}
	cfg.LeaveTimeout = 300 * time.Millisecond
	other, err := olric.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Shutdown(context.Background())
	members := func() int {
		ms, err := other.Client().Members(ctx)
		if err != nil {
			return -1
		}
		return len(ms)
	}
	poll(ctx, t, logs, "two members", func() bool { return members() == 2 })

	end, _ := ctx.Deadline()
	if !p.Stop(time.Until(end)) {
		t.Fatalf("still running at the test's deadline after SIGTERM (then killed):\n%s", logs.String())
	}
	if err := p.Err(); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, logs.String())
	}
	if !strings.Contains(logs.String(), "left the grid") {
		t.Fatalf("no graceful leave in its log:\n%s", logs.String())
	}
	poll(ctx, t, logs, "the other member sees it gone", func() bool { return members() == 1 })
}

// poll waits until cond holds or ctx ends.
func poll(ctx context.Context, t *testing.T, logs *child.Output, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v\n%s", what, ctx.Err(), logs.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestJoiningInstanceLimitsItsFirstRequests runs the README's quick start,
// its command lines taken from README.md: a first instance, then a second
// joining it; the first requests the
// second instance answers, from 16 clients (loopback addresses, so 16
// keys, about half of them on partitions the second member takes over),
// sent as soon as its port accepts connections, must all have been
// limited: RateLimit headers, and no request served unlimited in its log.
// A joining member holds the partitions it takes over for a grace period
// longer than the middleware's timeout; an instance that answers before it
// ends serves those keys' first requests unlimited.
func TestJoiningInstanceLimitsItsFirstRequests(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "cluster")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	base := ports.Triples(t, 2)
	var https [2]string
	for i := range https {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		https[i] = l.Addr().String()
		l.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	// The README's command lines, on this test's ports.
	lines := readmeInstances(t, strings.NewReplacer(
		"3420", fmt.Sprint(base[0]), "3422", fmt.Sprint(base[0]+2), "3430", fmt.Sprint(base[1]),
		"127.0.0.1:8180", https[0], "127.0.0.1:8181", https[1]))
	first := child.Start(t, exec.Command(bin, append(lines[0], "-port", fmt.Sprint(base[0]), "-http", https[0])...))
	defer first.Stop(10 * time.Second)
	poll(ctx, t, first.Out, "the first instance answers", func() bool {
		r, err := http.Get("http://" + https[0] + "/api/x")
		if err != nil {
			return false
		}
		r.Body.Close()
		return r.StatusCode == http.StatusOK
	})

	second := child.Start(t, exec.Command(bin, lines[1]...))
	defer second.Stop(10 * time.Second)
	poll(ctx, t, second.Out, "the second instance's port", func() bool {
		c, err := net.Dial("tcp", https[1])
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	const clients = 16
	answers := make(chan string, clients)
	for i := range clients {
		go func() {
			from := &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i))}
			c := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{LocalAddr: from}).DialContext}}
			r, err := c.Get("http://" + https[1] + "/api/hello")
			if err != nil {
				answers <- fmt.Sprintf("client %v: %v", from.IP, err)
				return
			}
			r.Body.Close()
			if r.StatusCode != http.StatusOK || r.Header.Get("RateLimit") == "" {
				answers <- fmt.Sprintf("client %v: %s without RateLimit headers (served unlimited)", from.IP, r.Status)
				return
			}
			answers <- ""
		}()
	}
	for range clients {
		if a := <-answers; a != "" {
			t.Error(a)
		}
	}
	if t.Failed() || strings.Contains(second.Out.String(), "without a limit") {
		t.Fatalf("the joining instance's first requests were not all limited; its log:\n%s", second.Out.String())
	}
}

// readmeInstances returns the arguments of each `bin/quickstart-cluster`
// command line of the README's quick start, in order, with ports mapped by
// r; it fails unless there are two.
func readmeInstances(t *testing.T, r *strings.Replacer) [][]string {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join("..", "..", "..", "README.md"))
	if os.IsNotExist(err) {
		t.Skip("README.md is not beside this module: not a checkout of the repository")
	}
	if err != nil {
		t.Fatal(err)
	}
	var instances [][]string
	for _, l := range strings.Split(string(readme), "\n") {
		fields := strings.Fields(l)
		if len(fields) == 0 || fields[0] != "bin/quickstart-cluster" {
			continue
		}
		var args []string
		for _, f := range fields[1:] {
			if f == "&" || strings.HasPrefix(f, "#") {
				break
			}
			args = append(args, r.Replace(f))
		}
		instances = append(instances, args)
	}
	if len(instances) != 2 {
		t.Fatalf("README.md starts %d quick-start instances (bin/quickstart-cluster …), want 2: %q", len(instances), instances)
	}
	return instances
}
