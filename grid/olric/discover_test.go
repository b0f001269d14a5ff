package olric

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// TestDiscover: Start joins what Config.Discover returns; a member that
// discovers only itself forms a cluster; an error from Discover fails
// Start and says so.
func TestDiscover(t *testing.T) {
	var calls atomic.Int32
	var seed string
	first := startCluster(t, 1, func(c *Config) {
		seed = memberlistAddr(*c)
		c.Discover = func(context.Context) ([]string, error) {
			calls.Add(1)
			return []string{seed}, nil // only itself: a new cluster
		}
	})[0]
	c := testConfig(t)
	self := memberlistAddr(c)
	c.Discover = func(context.Context) ([]string, error) {
		calls.Add(1)
		return []string{self, seed, seed}, nil
	}
	second, err := Start(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { shutdownAll(t, []*Member{second}) })
	if n := calls.Load(); n != 2 {
		t.Errorf("Discover called %d times by two Starts, want 2", n)
	}
	for _, m := range []*Member{first, second} {
		deadline := time.Now().Add(30 * time.Second)
		for {
			ms, err := m.node.client.Members(context.Background())
			if err == nil && len(ms) == 2 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s sees %d members (%v), want 2: the second joined what Discover found", m.Name(), len(ms), err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	failed := errors.New("no resolver")
	c = testConfig(t)
	c.Discover = func(context.Context) ([]string, error) { return nil, failed }
	if m, err := Start(context.Background(), c); !errors.Is(err, failed) {
		if m != nil {
			shutdownAll(t, []*Member{m})
		}
		t.Fatalf("Start with a failing Discover: %v, want its error", err)
	}
}
