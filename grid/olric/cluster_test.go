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

// children are the roles the test binary plays when re-executed with one
// of these environment variables set.
var children = map[string]func() int{
	childEnv:    childMain,
	attackerEnv: attackerMain,
}

func TestMain(m *testing.M) {
	for env, main := range children {
		if os.Getenv(env) != "" {
			os.Exit(main())
		}
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

// freeBase returns a port P such that P, P+1 and P+2 (TCP, and UDP for
// P+2) were free a moment ago: a member's Olric port, owner channel and
// gossip port (Olric cannot pick its own).
func freeBase(t testing.TB) int {
	t.Helper()
	for range 1000 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if p+2 <= 65535 && freeTCP(p) && freeTCP(p+1) && freeTCP(p+2) && freeUDP(p+2) {
			return p
		}
	}
	t.Fatal("no three free ports in a row")
	return 0
}

func freeTCP(p int) bool {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
	if err == nil {
		l.Close()
	}
	return err == nil
}

func freeUDP(p int) bool {
	l, err := net.ListenPacket("udp", "127.0.0.1:"+strconv.Itoa(p))
	if err == nil {
		l.Close()
	}
	return err == nil
}

// testConfig is a loopback member with short timings.
func testConfig(t testing.TB) Config {
	c := DefaultLocalConfig()
	c.BindPort = freeBase(t)
	// Leaving, a member waits up to LeaveTimeout until no routing table
	// lists it (Member.Shutdown): under the race detector Olric's
	// coordinator took 0.2-1.9 s after the leave to drop it, the machine
	// loaded 18-20 (TestShutdownUnderFragmentMoves, 12 runs).
	c.LeaveTimeout = 3 * time.Second
	c.RoutingRefresh = 50 * time.Millisecond
	c.RoutingLease = 400 * time.Millisecond
	c.HandoverGrace = 600 * time.Millisecond
	c.JoinTimeout = 60 * time.Second
	// Memberlist's "local" failure detection, slower than the default:
	// several members in one process under the race detector, on a
	// loaded machine, must not suspect each other (the test bed's tests
	// run the defaults, one member per process).
	c.ProbeInterval, c.ProbeTimeout, c.SuspicionMult = time.Second, 200*time.Millisecond, 3
	return c
}

// memberlistAddr is the gossip address of a member started with c.
func memberlistAddr(c Config) string {
	p := c.MemberlistBindPort
	if p == 0 {
		p = c.BindPort + 2
	}
	return net.JoinHostPort(c.BindAddr, strconv.Itoa(p))
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
	first := ms[0].routing.current()
	for _, m := range ms {
		r := m.routing.current()
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

// keySet returns n keys prefix0 … prefix(n-1).
func keySet(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprint(prefix, i)
	}
	return keys
}

// ownedKeys returns n keys that m owns.
func ownedKeys(m *Member, prefix string, n int) []string {
	var keys []string
	for i := 0; len(keys) < n; i++ {
		if k := prefix + strconv.Itoa(i); m.Owner(k) == m.Name() {
			keys = append(keys, k)
		}
	}
	return keys
}
