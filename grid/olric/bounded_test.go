package olric

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/core/wire"
)

// stuckStripe locks key's stripe on m, as an execution blocked in Olric
// (a Put to a crashed backup) holds it, and returns the unlock.
func stuckStripe(m *Member, key string) (unlock func()) {
	h := m.hash(key)
	st := &m.exec.stripes[(h>>32)%uint64(len(m.exec.stripes))]
	st.mu.Lock()
	return st.mu.Unlock
}

// mustWait is waitFor with a minute, failing when cond never holds.
func mustWait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if !waitFor(t, what, time.Minute, cond) {
		t.Fatalf("gave up waiting: %s", what)
	}
}

// TestExecuteReturnsAtItsDeadline holds an owner's stripe lock, as an
// execution stuck in Olric does, and checks that a caller still gets its
// answer by its deadline (the context's, Config.RequestTimeout without
// one, or a remote caller's budget), that the owner's connection keeps
// serving other keys meanwhile, and that nothing runs for a caller that
// left once the stripe is free: the bucket loses no token to it.
func TestExecuteReturnsAtItsDeadline(t *testing.T) {
	clusters := map[[2]int][]*Member{}
	cluster := func(n, replicas int) []*Member {
		if ms, ok := clusters[[2]int{n, replicas}]; ok {
			return ms
		}
		ms := startCluster(t, n, func(c *Config) {
			c.ReplicaCount = replicas
			c.RequestTimeout = 200 * time.Millisecond
		})
		clusters[[2]int{n, replicas}] = ms
		return ms
	}
	cfg := testBucket(1000)
	cases := []struct {
		name        string
		members     int
		replicas    int
		caller      int           // index of the calling member; 0 owns the keys
		timeout     time.Duration // 0: no deadline, RequestTimeout bounds it
		detachLimit int64         // 0: the default; -1: no room
		want        error
	}{
		{"local caller's deadline", 2, 2, 0, 50 * time.Millisecond, 0, context.DeadlineExceeded},
		{"local caller's request timeout", 2, 2, 0, 0, 0, context.DeadlineExceeded},
		{"remote caller's budget", 2, 2, 1, 50 * time.Millisecond, 0, context.DeadlineExceeded},
		{"in place, stripe held", 1, 1, 0, 50 * time.Millisecond, 0, context.DeadlineExceeded},
		{"too many detached", 2, 2, 0, time.Minute, -1, errDetached},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ms := cluster(tc.members, tc.replicas)
			owner, caller := ms[0], ms[tc.caller]
			keys := ownedKeys(owner, fmt.Sprintf("deadline%d-", i), 64)
			key, other := keys[0], ""
			for _, k := range keys[1:] {
				if (owner.hash(k)>>32)%uint64(len(owner.exec.stripes)) != (owner.hash(key)>>32)%uint64(len(owner.exec.stripes)) {
					other = k
					break
				}
			}
			if got, want := owner.exec.localOnly(owner.hash(key)), tc.replicas == 1; got != want {
				t.Fatalf("partition of %s local only: %v, want %v", key, got, want)
			}
			long, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for _, k := range []string{key, other} {
				if _, err := caller.Execute(long, k, consumeReq(&cfg, 1)); err != nil {
					t.Fatal(err)
				}
			}
			before := owner.exec.detached.Load()
			owner.exec.detachLimit.Store(tc.detachLimit)
			defer owner.exec.detachLimit.Store(0)

			unlock := stuckStripe(owner, key)
			unlocked := false
			defer func() {
				if !unlocked {
					unlock()
				}
			}()
			done := make(chan error, 1)
			go func() {
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				if tc.timeout > 0 {
					ctx, cancel = context.WithTimeout(ctx, tc.timeout)
				}
				defer cancel()
				_, err := caller.Execute(ctx, key, consumeReq(&cfg, 1))
				done <- err
			}()
			select {
			case err := <-done:
				if !errors.Is(err, tc.want) {
					t.Fatalf("Execute: %v, want %v", err, tc.want)
				}
			case <-time.After(time.Minute):
				t.Fatal("Execute still waiting on a stuck owner a minute on")
			}
			owner.exec.detachLimit.Store(0)
			if tc.want != errDetached {
				// The owner's side gave up too: its execution is detached.
				mustWait(t, "the owner's execution to be detached", func() bool { return owner.exec.detached.Load() == before+1 })
			}
			if tc.caller != 0 {
				// The owner's connection is not held by the stuck key.
				if _, err := caller.Execute(long, other, consumeReq(&cfg, 1)); err != nil {
					t.Fatalf("another key over the same connection: %v", err)
				}
			}
			unlock()
			unlocked = true
			mustWait(t, "detached executions to end", func() bool { return owner.exec.detached.Load() == before })
			resp, err := caller.Execute(long, key, availableReq(&cfg))
			if err != nil {
				t.Fatal(err)
			}
			if got := resp.Results[0].Tokens; got != 999 {
				t.Fatalf("%d tokens left, want 999: the request of a caller that left ran", got)
			}
		})
	}
}

// TestCloneRequestSharesNothing checks that a detached execution's copy of
// a request survives its caller reusing the original.
func TestCloneRequestSharesNothing(t *testing.T) {
	cfg := testBucket(10)
	op := cfg.Clone()
	r := wire.Request{Mode: wire.ModeCreateIfAbsent, Config: &cfg, Ops: []wire.Op{{Kind: wire.OpTryConsume, Tokens: 1, Config: &op}}}
	c := cloneRequest(&r)
	r.Ops[0].Tokens = 7
	r.Config.Bandwidths[0].Capacity = 99
	r.Ops[0].Config.Bandwidths[0].Capacity = 98
	if c.Ops[0].Tokens != 1 || c.Config.Bandwidths[0].Capacity != 10 || c.Ops[0].Config.Bandwidths[0].Capacity != 10 {
		t.Fatalf("the copy changed with the original: %+v", c)
	}
}
