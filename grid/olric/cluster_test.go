package olric

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(childMain())
	}
	code := m.Run()
	if code == 0 {
		// Goroutines of Olric's dependencies outlive Shutdown briefly: a
		// memberlist probe waits out its timeout. Poll for up to 5 s.
		// go-redis (Olric's client) re-dials a departed member from a
		// goroutine that sleeps a second between attempts and notices only
		// then that its pool was closed, so it is ignored.
		ignore := goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial")
		deadline := time.Now().Add(5 * time.Second)
		for {
			err := goleak.Find(ignore)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				fmt.Fprintln(os.Stderr, "goleak:", err)
				code = 1
				break
			}
		}
	}
	os.Exit(code)
}

// freePorts returns n ports that were free a moment ago.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ls []net.Listener
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

// testConfig is a loopback member with short timings.
func testConfig(t testing.TB) Config {
	c := DefaultLocalConfig()
	p := freePorts(t, 2)
	c.BindPort, c.MemberlistBindPort = p[0], p[1]
	c.ChannelAddr = "127.0.0.1:0"
	c.LeaveTimeout = 300 * time.Millisecond
	c.RoutingRefresh = 50 * time.Millisecond
	c.RoutingLease = 400 * time.Millisecond
	c.HandoverGrace = 600 * time.Millisecond
	c.JoinTimeout = 60 * time.Second
	return c
}

func memberlistAddr(c Config) string {
	return net.JoinHostPort(c.BindAddr, strconv.Itoa(c.MemberlistBindPort))
}

// startCluster starts n members in this process (the first one seeds the
// others), waits until their routing agrees and registers their shutdown.
func startCluster(t testing.TB, n int, tweak func(*Config)) []*Member {
	t.Helper()
	var ms []*Member
	var seed string
	t.Cleanup(func() { shutdownAll(t, ms) })
	for i := range n {
		var m *Member
		var err error
		// Ports picked free may be taken before Olric binds them: retry.
		for attempt := 0; ; attempt++ {
			c := testConfig(t)
			if tweak != nil {
				tweak(&c)
			}
			if i > 0 {
				c.Peers = []string{seed}
			}
			m, err = Start(context.Background(), c)
			if err == nil {
				if i == 0 {
					seed = memberlistAddr(c)
				}
				break
			}
			if attempt == 4 || !strings.Contains(err.Error(), "address already in use") {
				t.Fatal(err)
			}
		}
		ms = append(ms, m)
	}
	waitStable(t, ms)
	return ms
}

func shutdownAll(t testing.TB, ms []*Member) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, m := range ms {
		wg.Go(func() {
			if err := m.Shutdown(ctx); err != nil {
				t.Errorf("shutdown %s: %v", m.Name(), err)
			}
		})
	}
	wg.Wait()
}

// waitStable polls until every member reads the same routing table with
// all of ms as owners and no hand-over guard is pending.
func waitStable(t testing.TB, ms []*Member) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if stable(ms) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("cluster did not settle")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func stable(ms []*Member) bool {
	first := ms[0].routes.Load()
	for _, m := range ms {
		r := m.routes.Load()
		if r.members != len(ms) {
			return false
		}
		now := m.mono()
		for p, o := range r.owners {
			if o != first.owners[p] {
				return false
			}
			if o == m.name && r.guardUntil[p] > now {
				return false
			}
		}
	}
	return true
}
