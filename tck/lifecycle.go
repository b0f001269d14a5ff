package tck

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/core/wire"
)

func checkRecovery(e *env) {
	var calls atomic.Int64
	base := staticConfig(core.Greedy(10, 1, time.Hour))
	cfg := func(ctx context.Context) (core.Config, error) { calls.Add(1); return base(ctx) }
	for _, tc := range []struct {
		name string
		opts []bucketgrid.ManagerOption
	}{{"reconstruct", nil}, {"fail", []bucketgrid.ManagerOption{bucketgrid.WithRecoveryFail()}}} {
		m := bucketgrid.NewManager(e.execs[0], tc.opts...)
		key := e.key("recovery-" + tc.name)
		h := m.Bucket(key, cfg)
		if _, err := h.TryConsume(e.ctx, 4); err != nil {
			e.Fatalf("%s: %v", tc.name, err)
		}
		if err := bucketgrid.NewManager(e.execs[len(e.execs)-1]).RemoveBucket(e.ctx, key); err != nil {
			e.Fatalf("%s: RemoveBucket: %v", tc.name, err)
		}
		calls.Store(0)
		n, err := h.AvailableTokens(e.ctx)
		switch tc.name {
		case "reconstruct":
			if err != nil || n != 10 || calls.Load() != 1 {
				e.Errorf("reconstruct: after removal %d tokens, err %v, configuration fetched %d times; want a full bucket of 10, fetched once", n, err, calls.Load())
			}
		case "fail":
			if !errors.Is(err, bucketgrid.ErrBucketNotFound) {
				e.Errorf("fail: after removal err = %v, want ErrBucketNotFound", err)
			}
			if calls.Load() != 0 {
				e.Errorf("fail: the configuration function ran after the bucket was lost")
			}
		}
	}
}

// checkReplacementRace interleaves handles that want configuration versions 1
// and 2: version 2 must win and stay, whatever the order.
func checkReplacementRace(e *env) {
	key := e.key("versions")
	v1 := staticConfig(core.Greedy(10, 1, time.Hour))
	v2 := staticConfig(core.Greedy(20, 1, time.Hour))
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		m := bucketgrid.NewManager(e.execs[i%len(e.execs)])
		var h *bucketgrid.Handle
		if i%2 == 0 {
			h = m.Bucket(key, v1, bucketgrid.WithConfigVersion(1, core.InheritAsIs))
		} else {
			h = m.Bucket(key, v2, bucketgrid.WithConfigVersion(2, core.InheritAsIs))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 10; j++ {
				if _, err := h.TryConsume(e.ctx, 1); err != nil {
					e.Errorf("TryConsume: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	m := bucketgrid.NewManager(e.execs[0])
	cfg, version, found, err := m.Configuration(e.ctx, key)
	if err != nil || !found {
		e.Fatalf("Configuration: found=%v err=%v", found, err)
	}
	if version != 2 || cfg.Bandwidths[0].Capacity != 20 {
		e.Errorf("after racing versions 1 and 2 the stored version is %d with capacity %d; want version 2, capacity 20 (a stored version must never go backwards)", version, cfg.Bandwidths[0].Capacity)
	}
	// an old client keeps working against the newer configuration
	if _, err := m.Bucket(key, v1, bucketgrid.WithConfigVersion(1, core.InheritAsIs)).TryConsume(e.ctx, 1); err != nil {
		e.Errorf("a version-1 client after the upgrade: %v", err)
	}
	if _, version, _, _ = m.Configuration(e.ctx, key); version != 2 {
		e.Errorf("a version-1 client lowered the stored version to %d", version)
	}
}

// checkExpiration writes with a fixed TTL and waits (real time: stores
// expire on their own clocks) for the bucket to be re-created.
func checkExpiration(e *env) {
	plan := newTTLPlan(e.cfg.ttl)
	ttl := max(plan.short, e.cfg.ttl)
	var calls atomic.Int64
	base := staticConfig(core.Greedy(10, 1, time.Hour))
	cfg := func(ctx context.Context) (core.Config, error) { calls.Add(1); return base(ctx) }
	m := bucketgrid.NewManager(e.execs[0], bucketgrid.WithExpiration(wire.Expiry{Kind: wire.ExpireFixed, Fixed: int64(ttl)}))
	key := e.key("expiry")
	h := m.Bucket(key, cfg)
	// two writes: Insert creates the bucket, Replace updates it, and the
	// TTL of the last one must hold
	for _, n := range []int64{3, 4} {
		if _, err := h.TryConsume(e.ctx, n); err != nil {
			e.Fatalf("TryConsume: %v", err)
		}
	}
	// the write returned before TryConsume did: a Get sent after this
	// deadline that finds the bucket proves it outlived its TTL
	deadline := time.Now().Add(plan.late(ttl))
	for {
		_, _, found, err := m.Configuration(e.ctx, key)
		if err != nil {
			e.Fatalf("Configuration: %v", err)
		}
		if !found {
			break
		}
		if time.Now().After(deadline) {
			e.Fatalf("a bucket written with a %v TTL still exists more than %v after the write: the executor's writes do not expire — the store ignores the TTL of Insert or Replace (or Replace drops it)", ttl, plan.late(ttl))
		}
		time.Sleep(ttl / 8)
	}
	n, err := h.AvailableTokens(e.ctx)
	if err != nil || n != 10 || calls.Load() != 2 {
		e.Errorf("after expiry: %d tokens (err %v), configuration fetched %d times; want a re-created full bucket of 10, fetched twice", n, err, calls.Load())
	}
}

func checkRemoval(e *env) {
	m := bucketgrid.NewManager(e.execs[0])
	key := e.key("removal")
	if err := m.RemoveBucket(e.ctx, key); err != nil {
		e.Errorf("removing an absent bucket: %v", err)
	}
	if _, err := m.Bucket(key, staticConfig(core.Greedy(5, 1, time.Hour))).TryConsume(e.ctx, 1); err != nil {
		e.Fatalf("TryConsume: %v", err)
	}
	if _, _, found, err := m.Configuration(e.ctx, key); err != nil || !found {
		e.Fatalf("Configuration of an existing bucket: found=%v err=%v", found, err)
	}
	if err := bucketgrid.NewManager(e.execs[len(e.execs)-1]).RemoveBucket(e.ctx, key); err != nil {
		e.Fatalf("RemoveBucket: %v", err)
	}
	if _, _, found, err := m.Configuration(e.ctx, key); err != nil || found {
		e.Errorf("after RemoveBucket the bucket is still there (found=%v, err=%v)", found, err)
	}
}

func checkCancelled(e *env) {
	h := e.handles(e.key("cancelled"), staticConfig(core.Greedy(5, 1, time.Hour)))[0]
	if _, err := h.TryConsume(e.ctx, 1); err != nil {
		e.Fatalf("TryConsume: %v", err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	cancel()
	if ok, err := h.TryConsume(ctx, 1); err == nil {
		e.Errorf("TryConsume with a cancelled context returned %v and no error", ok)
	}
	if n, err := h.AvailableTokens(e.ctx); err != nil || n != 4 {
		e.Errorf("after a cancelled call: %d tokens (err %v), want 4", n, err)
	}
}
