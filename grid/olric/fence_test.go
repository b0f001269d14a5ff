package olric

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/core/wire"
)

// TestLeaseFence: while the two members that do not own a key hold leases
// of its tokens, a reset, an addition, a configuration replacement or a
// removal fills the bucket (the removed one is created anew, full); from
// then on the members admit no more than the filled bucket holds. Without
// the fence the holders spend their leases on top; without the generation
// their give-backs land on top of the owner's own checks.
func TestLeaseFence(t *testing.T) {
	const capacity = 100
	ms := startCluster(t, 3, func(c *Config) {
		c.Leases.Enabled = true
		c.Leases.Lifetime = 2 * time.Second // outlives the steps below, under load too
	})
	cfg := testBucket(capacity)
	other, err := core.NewConfig(core.Intervally(capacity, capacity, 2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		op   wire.Op
	}{
		{"reset", wire.Op{Kind: wire.OpReset}},
		{"addition", wire.Op{Kind: wire.OpAddTokens, Tokens: capacity}},
		{"replacement", wire.Op{Kind: wire.OpReplaceConfiguration, Config: &other, Inheritance: core.InheritReset}},
		{"removal", wire.Op{}}, // Member.Remove
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			for attempt := 0; ; attempt++ {
				key := fmt.Sprintf("fence-%s-%d", tc.name, attempt)
				held, after, ok := fenceRound(ctx, t, ms, key, &cfg, tc.op)
				if !ok {
					if attempt == 3 {
						t.Fatal("no lease taken in 4 tries: the test cannot judge")
					}
					continue
				}
				t.Logf("%s: %d tokens leased out at the operation, %d admitted after it (the bucket it left holds %d)", key, held, after, capacity)
				if after > capacity {
					t.Fatalf("%d admitted after the %s, which left %d tokens", after, tc.name, capacity)
				}
				if after == 0 {
					t.Fatalf("nothing admitted after the %s", tc.name)
				}
				if held > 0 {
					return
				}
				if attempt == 3 {
					t.Fatal("no lease held tokens at the operation in 4 tries: the test cannot judge")
				}
			}
		})
	}
}

// fenceRound warms key up until both members that do not own it hold a
// lease with tokens left, runs op on the owner (a removal for op's zero
// value), has the owner consume half the capacity, and then every member
// consume until the bucket is empty. It returns the tokens the leases held
// just before op and the tokens admitted after op returned; ok is false
// when a holder took no lease.
func fenceRound(ctx context.Context, t *testing.T, ms []*Member, key string, cfg *core.Config, op wire.Op) (held, after int64, ok bool) {
	t.Helper()
	owner := ms[0].Owner(key)
	var holders []*Member
	var ownerM *Member
	for _, m := range ms {
		if m.Name() == owner {
			ownerM = m
		} else {
			holders = append(holders, m)
		}
	}
	if ownerM == nil || len(holders) != 2 {
		t.Fatalf("owner %q of %s not among the members", owner, key)
	}
	leased := func(m *Member) int64 {
		e := trackedKey(m, key)
		if e == nil {
			return 0
		}
		e.mu.Lock()
		defer e.mu.Unlock()
		if !e.l.valid(m.mono()) {
			return 0
		}
		return e.l.budget
	}
	for _, m := range holders {
		for i := 0; leased(m) == 0; i++ {
			if i == 40 {
				return 0, 0, false
			}
			if _, err := m.Execute(ctx, key, consumeReq(cfg, 1)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, m := range holders {
		held += leased(m)
	}
	if op.Kind == 0 {
		if err := ownerM.Remove(ctx, key); err != nil {
			t.Fatal(err)
		}
	} else {
		resp, err := ownerM.Execute(ctx, key, wire.Request{Mode: wire.ModeBare, Ops: []wire.Op{op}})
		if err != nil || resp.Status != wire.StatusOK {
			t.Fatalf("%v: %v %v", op.Kind, err, resp.Status)
		}
	}
	var n atomic.Int64
	capacity := cfg.Bandwidths[0].Capacity
	for range capacity / 2 {
		resp, err := ownerM.Execute(ctx, key, consumeReq(cfg, 1))
		if err != nil {
			t.Fatal(err)
		}
		if resp.Results[0].OK {
			n.Add(1)
		}
	}
	var wg sync.WaitGroup
	for _, m := range ms {
		wg.Go(func() {
			for range 3 * capacity {
				resp, err := m.Execute(ctx, key, consumeReq(cfg, 1))
				if err != nil {
					t.Error(err)
					return
				}
				if resp.Results[0].OK {
					n.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return held, n.Load(), true
}
