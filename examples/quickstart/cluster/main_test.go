package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
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

// TestJoiningInstanceLimitsItsFirstRequests runs the README's quick start:
// a first instance, then a second joining it; the first requests the
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

	first := child.Start(t, exec.Command(bin, "-port", fmt.Sprint(base[0]), "-http", https[0]))
	defer first.Stop(10 * time.Second)
	poll(ctx, t, first.Out, "the first instance answers", func() bool {
		r, err := http.Get("http://" + https[0] + "/api/x")
		if err != nil {
			return false
		}
		r.Body.Close()
		return r.StatusCode == http.StatusOK
	})

	second := child.Start(t, exec.Command(bin, "-port", fmt.Sprint(base[1]),
		"-join", fmt.Sprintf("127.0.0.1:%d", base[0]+2), "-http", https[1]))
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
