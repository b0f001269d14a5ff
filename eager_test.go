package bucketgrid_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/core/wire"
)

// countingExec counts the requests that reach an executor.
type countingExec struct {
	bucketgrid.Executor
	n atomic.Int64
}

func (c *countingExec) Execute(ctx context.Context, key string, req wire.Request) (wire.Response, error) {
	c.n.Add(1)
	return c.Executor.Execute(ctx, key, req)
}

// exec returns a CAS executor over the fixture's store and clock.
func (f *managerFixture) exec() bucketgrid.Executor {
	return cas.New(f.store, cas.WithClock(f.clock))
}

// eagerFixture is a managerFixture whose Manager counts its executor's
// requests.
func eagerFixture(t *testing.T, opts ...bucketgrid.ManagerOption) (*managerFixture, *countingExec) {
	t.Helper()
	f := newManagerFixture(t)
	exec := &countingExec{Executor: f.exec()}
	opts = append([]bucketgrid.ManagerOption{bucketgrid.WithClock(f.clock)}, opts...)
	f.m = bucketgrid.NewManager(exec, opts...)
	return f, exec
}

// TestEagerConfigOneRequestPerOperation: with WithEagerConfig a new bucket
// costs one executor request instead of two, every operation calls the
// configuration function, and the results are those of the lazy default,
// operation for operation.
func TestEagerConfigOneRequestPerOperation(t *testing.T) {
	ctx := context.Background()
	bw := core.Greedy(3, 3, time.Minute)
	type step struct {
		ok     bool
		tokens int64
	}
	run := func(opts ...bucketgrid.ManagerOption) (steps []step, requests int64, calls int) {
		f, exec := eagerFixture(t, opts...)
		for _, key := range []string{"a", "b"} {
			h := f.m.Bucket(key, f.config(bw))
			for range 5 {
				p, err := h.TryConsumeAndReturnRemaining(ctx, 1)
				if err != nil {
					t.Fatal(err)
				}
				steps = append(steps, step{p.Consumed, p.Remaining})
			}
			f.clock.Advance(20 * time.Second) // one token back
			n, err := h.AvailableTokens(ctx)
			if err != nil {
				t.Fatal(err)
			}
			steps = append(steps, step{true, n})
		}
		return steps, exec.n.Load(), f.calls
	}
	lazy, lazyRequests, lazyCalls := run()
	eager, eagerRequests, eagerCalls := run(bucketgrid.WithEagerConfig())
	for i := range lazy {
		if lazy[i] != eager[i] {
			t.Fatalf("step %d: eager %+v, lazy %+v", i, eager[i], lazy[i])
		}
	}
	// 2 buckets × 6 operations; the lazy default sends a second request
	// for each new bucket and calls the function only then
	if lazyRequests != 14 || lazyCalls != 2 {
		t.Errorf("lazy: %d requests, %d configuration calls, want 14 and 2", lazyRequests, lazyCalls)
	}
	if eagerRequests != 12 || eagerCalls != 12 {
		t.Errorf("eager: %d requests, %d configuration calls, want 12 and 12", eagerRequests, eagerCalls)
	}
}

// TestEagerConfigVersioned: with WithConfigVersion a newer configuration
// replaces the stored one in the same single request, tokens carried over
// by the strategy, and a handle with an older version never lowers it.
func TestEagerConfigVersioned(t *testing.T) {
	f, exec := eagerFixture(t, bucketgrid.WithEagerConfig())
	ctx := context.Background()
	v1 := f.m.Bucket("k", f.config(core.Greedy(10, 10, time.Hour)), bucketgrid.WithConfigVersion(1, core.InheritAdditive))
	if _, err := v1.TryConsume(ctx, 4); err != nil { // 6 left of 10
		t.Fatal(err)
	}
	v2 := f.m.Bucket("k", f.config(core.Greedy(20, 20, time.Hour)), bucketgrid.WithConfigVersion(2, core.InheritAdditive))
	before := exec.n.Load()
	n, err := v2.AvailableTokens(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n != 16 || exec.n.Load()-before != 1 {
		t.Errorf("after the replacement: %d tokens in %d requests, want 16 (6 + 10 more capacity) in 1", n, exec.n.Load()-before)
	}
	if n, err = v1.AvailableTokens(ctx); err != nil || n != 16 {
		t.Errorf("through the older handle: %d %v, want the newer configuration's 16", n, err)
	}
	_, version, found, err := f.m.Configuration(ctx, "k")
	if err != nil || !found || version != 2 {
		t.Errorf("stored version %d (%v %v), want 2", version, found, err)
	}
}

// TestEagerConfigRecoveryFail: under WithRecoveryFail a handle that has seen its
// bucket still reports it vanished, instead of re-creating it from the
// configuration it would send.
func TestEagerConfigRecoveryFail(t *testing.T) {
	f, _ := eagerFixture(t, bucketgrid.WithEagerConfig(), bucketgrid.WithRecoveryFail())
	ctx := context.Background()
	h := f.m.Bucket("k", f.config(core.Greedy(5, 5, time.Hour)))
	if ok, err := h.TryConsume(ctx, 1); !ok || err != nil {
		t.Fatalf("first consume: %v %v", ok, err)
	}
	if err := f.m.RemoveBucket(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.TryConsume(ctx, 1); !errors.Is(err, bucketgrid.ErrBucketNotFound) {
		t.Fatalf("after removal: %v, want ErrBucketNotFound", err)
	}
	if f.store.Len() != 0 {
		t.Error("the vanished bucket was re-created")
	}
}

// TestEagerConfigErrors: a failing or invalid configuration fails the
// operation before any request; a corrupt record is still replaced under
// RecoveryReconstruct.
func TestEagerConfigErrors(t *testing.T) {
	ctx := context.Background()
	f, exec := eagerFixture(t, bucketgrid.WithEagerConfig(), bucketgrid.WithLogger(slog.New(slog.DiscardHandler)))
	boom := errors.New("plan lookup failed")
	if _, err := f.m.Bucket("k", func(context.Context) (core.Config, error) { return core.Config{}, boom }).TryConsume(ctx, 1); !errors.Is(err, boom) {
		t.Errorf("failing configuration: %v, want its error", err)
	}
	if _, err := f.m.Bucket("k", f.config(core.Greedy(0, 1, time.Second))).TryConsume(ctx, 1); !errors.Is(err, core.ErrCapacity) {
		t.Errorf("invalid configuration: %v, want core.ErrCapacity", err)
	}
	if exec.n.Load() != 0 || f.store.Len() != 0 {
		t.Fatalf("%d requests reached the executor, %d buckets stored; want none", exec.n.Load(), f.store.Len())
	}
	plantCorrupt(t, f, "c")
	ok, err := f.m.Bucket("c", f.config(core.Greedy(2, 2, time.Hour))).TryConsume(ctx, 1)
	if !ok || err != nil || f.m.Stats().CorruptReplaced != 1 {
		t.Errorf("corrupt record: %v %v, %d replaced; want a new bucket", ok, err, f.m.Stats().CorruptReplaced)
	}
}
