package olric

import (
	"context"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// flakyListener fails Accept with EMFILE while failing is set, as a
// listener does when the process runs out of file descriptors: the
// connections wait (here: held) until an Accept succeeds again.
type flakyListener struct {
	net.Listener
	failing atomic.Bool
	failed  atomic.Int64
	mu      sync.Mutex
	held    []net.Conn
}

func (l *flakyListener) Accept() (net.Conn, error) {
	emfile := &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	if l.failing.Load() {
		l.failed.Add(1)
		time.Sleep(time.Millisecond)
		return nil, emfile
	}
	l.mu.Lock()
	if len(l.held) > 0 {
		c := l.held[0]
		l.held = l.held[1:]
		l.mu.Unlock()
		return c, nil
	}
	l.mu.Unlock()
	c, err := l.Listener.Accept()
	if err == nil && l.failing.Load() {
		// The episode began while this Accept waited.
		l.mu.Lock()
		l.held = append(l.held, c)
		l.mu.Unlock()
		l.failed.Add(1)
		return nil, emfile
	}
	return c, err
}

// TestAcceptErrors puts a member's listener through an episode of EMFILE
// and checks that it accepts again afterwards: a peer that could not reach
// it during the episode gets its answer after.
func TestAcceptErrors(t *testing.T) {
	var mu sync.Mutex
	listeners := map[string]*flakyListener{}
	ms := startCluster(t, 2, func(c *Config) {
		c.listen = func(network, addr string) (net.Listener, error) {
			l, err := net.Listen(network, addr)
			if err != nil {
				return nil, err
			}
			mu.Lock()
			defer mu.Unlock()
			listeners[addr] = &flakyListener{Listener: l}
			return listeners[addr], nil
		}
	})
	// ms[1] has not dialled ms[0] yet.
	fl := listeners[ms[0].ChannelAddr()]
	fl.failing.Store(true)
	key := ownedKeys(ms[0], "emfile-", 1)[0]
	cfg := testBucket(10)
	done := make(chan error, 1)
	go func() {
		_, err := ms[1].Execute(context.Background(), key, consumeReq(&cfg, 1))
		done <- err
	}()
	deadline := time.Now().Add(30 * time.Second)
	for fl.failed.Load() < 10 {
		if time.Now().After(deadline) {
			t.Fatal("Accept was not retried")
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case err := <-done:
		t.Fatalf("answered during the episode: %v", err)
	default:
	}
	fl.failing.Store(false)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	t.Logf("%d failed Accepts, then served", ms[0].channel.acceptErrors.Load())
	if ms[0].channel.acceptErrors.Load() < 10 {
		t.Errorf("%d accept errors counted", ms[0].channel.acceptErrors.Load())
	}
}
