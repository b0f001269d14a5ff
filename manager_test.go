package bucketgrid_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/cas/memstore"
	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/core/wire"
)

type managerFixture struct {
	clock *clock.Fake
	store *memstore.Store
	m     *bucketgrid.Manager
	calls int
}

func newManagerFixture(t *testing.T, opts ...bucketgrid.ManagerOption) *managerFixture {
	t.Helper()
	f := &managerFixture{clock: clock.NewFake(time.Unix(1_800_000_000, 0))}
	f.store = memstore.New(memstore.WithClock(f.clock))
	opts = append([]bucketgrid.ManagerOption{bucketgrid.WithClock(f.clock)}, opts...)
	f.m = bucketgrid.NewManager(cas.New(f.store, cas.WithClock(f.clock)), opts...)
	return f
}

func (f *managerFixture) config(bws ...core.Bandwidth) func(context.Context) (core.Config, error) {
	return func(context.Context) (core.Config, error) {
		f.calls++
		return core.NewConfig(bws...)
	}
}

func TestConfigFuncRunsOnlyOnCreation(t *testing.T) {
	f := newManagerFixture(t)
	ctx := context.Background()
	h := f.m.Bucket("k", f.config(core.Greedy(5, 5, time.Second)))
	for i := 0; i < 5; i++ {
		if ok, err := h.TryConsume(ctx, 1); !ok || err != nil {
			t.Fatalf("consume %d: %v %v", i, ok, err)
		}
	}
	// a second handle to the same key finds the bucket: no configuration fetch
	if ok, err := f.m.Bucket("k", f.config(core.Greedy(99, 1, time.Second))).TryConsume(ctx, 1); ok || err != nil {
		t.Fatalf("6th token: %v %v, want refused", ok, err)
	}
	if f.calls != 1 {
		t.Fatalf("configuration fetched %d times, want once", f.calls)
	}
}

func TestInvalidConfigFromConfigFuncWritesNothing(t *testing.T) {
	f := newManagerFixture(t)
	ctx := context.Background()
	_, err := f.m.Bucket("k", f.config(core.Greedy(0, 1, time.Second))).TryConsume(ctx, 1)
	if !errors.Is(err, core.ErrCapacity) {
		t.Fatalf("err = %v, want core.ErrCapacity", err)
	}
	if f.store.Len() != 0 {
		t.Fatal("an invalid configuration reached the store")
	}
	boom := errors.New("plan lookup failed")
	_, err = f.m.Bucket("k", func(context.Context) (core.Config, error) { return core.Config{}, boom }).TryConsume(ctx, 1)
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want the configuration function's error", err)
	}
}

func TestImplicitReplacement(t *testing.T) {
	f := newManagerFixture(t)
	ctx := context.Background()
	v1 := f.m.Bucket("k", f.config(core.Greedy(10, 10, time.Minute)), bucketgrid.WithConfigVersion(1, core.InheritAdditive))
	if _, err := v1.TryConsume(ctx, 4); err != nil {
		t.Fatal(err)
	}
	v2 := f.m.Bucket("k", f.config(core.Greedy(30, 10, time.Minute)), bucketgrid.WithConfigVersion(2, core.InheritAdditive))
	n, err := v2.AvailableTokens(ctx)
	if err != nil || n != 26 {
		t.Fatalf("after upgrade to capacity 30 with ADDITIVE: %d (err %v), want 6+20 = 26", n, err)
	}
	if f.calls != 2 {
		t.Fatalf("configuration fetched %d times, want 2 (create, replace)", f.calls)
	}
	if _, err := v1.TryConsume(ctx, 1); err != nil { // the old version no longer replaces anything
		t.Fatal(err)
	}
	_, version, _, err := f.m.Configuration(ctx, "k")
	if err != nil || version != 2 || f.calls != 2 {
		t.Fatalf("version %d (err %v, fetches %d), want 2 and no new fetch", version, err, f.calls)
	}
}

func TestBlockingConsumeWaitsExactly(t *testing.T) {
	var l bucketgrid.CountingListener
	f := newManagerFixture(t, bucketgrid.WithListener(&l))
	ctx := context.Background()
	h := f.m.Bucket("k", f.config(core.Greedy(10, 10, time.Second)))
	if err := h.Consume(ctx, 10); err != nil {
		t.Fatal(err)
	}
	t0 := f.clock.Now()
	if err := h.Consume(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if waited := time.Duration(f.clock.Now() - t0); waited != 300*time.Millisecond {
		t.Fatalf("waited %v, want 300ms", waited)
	}
	if l.Parked() != 300*time.Millisecond || l.Consumed() != 13 {
		t.Fatalf("listener parked %v consumed %d", l.Parked(), l.Consumed())
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := h.Consume(short, 5); !errors.Is(err, context.DeadlineExceeded) || l.Rejected() != 5 {
		t.Fatalf("Consume past its deadline: %v (rejected %d)", err, l.Rejected())
	}
	if err := h.Consume(ctx, 11); !errors.Is(err, bucketgrid.ErrExceedsCapacity) {
		t.Fatalf("Consume above capacity: %v, want ErrExceedsCapacity", err)
	}
}

// cancelClock cancels the caller's context as it parks: every sleep ends
// by cancellation.
type cancelClock struct {
	*clock.Fake
	cancel context.CancelFunc
}

func (c cancelClock) Sleep(ctx context.Context, _ time.Duration) error {
	c.cancel()
	<-ctx.Done()
	return ctx.Err()
}

func TestInterruptedConsumeGivesTokensBack(t *testing.T) {
	var l bucketgrid.CountingListener
	f := newManagerFixture(t)
	bg := context.Background()
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	m := bucketgrid.NewManager(cas.New(f.store, cas.WithClock(f.clock)),
		bucketgrid.WithClock(cancelClock{f.clock, cancel}), bucketgrid.WithListener(&l))
	h := m.Bucket("k", f.config(core.Greedy(10, 10, time.Second)))
	if _, err := h.TryConsume(bg, 10); err != nil {
		t.Fatal(err)
	}
	if err := h.Consume(ctx, 5); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want Canceled", err)
	}
	if n, _ := h.AvailableTokens(bg); n != 0 {
		t.Fatalf("after the interrupted wait %d tokens, want 0 (the reservation returned)", n)
	}
	if l.Interrupted() != 1 {
		t.Fatalf("interruptions %d, want 1", l.Interrupted())
	}
}

func TestHandleArgumentErrors(t *testing.T) {
	f := newManagerFixture(t)
	ctx := context.Background()
	h := f.m.Bucket("k", f.config(core.Greedy(10, 1, time.Hour)))
	if _, err := h.TryConsume(ctx, -1); !errors.Is(err, bucketgrid.ErrTokens) {
		t.Fatalf("TryConsume(-1): %v", err)
	}
	if _, err := h.ConsumeIgnoringRateLimits(ctx, math.MaxInt64); !errors.Is(err, bucketgrid.ErrOverdraftTooLarge) {
		t.Fatalf("huge overdraft: %v", err)
	}
	if f.calls != 1 || f.store.Len() != 1 {
		t.Fatalf("fetches %d, entries %d", f.calls, f.store.Len())
	}
}

func TestExpirationTTLs(t *testing.T) {
	for _, tc := range []struct {
		name   string
		expiry wire.Expiry
		want   time.Duration
	}{
		{"never", wire.Expiry{}, 0},
		{"fixed", wire.Expiry{Kind: wire.ExpireFixed, Fixed: int64(time.Minute)}, time.Minute},
		// 4 of 10 tokens used at 10/s: full again in 400ms, plus the margin
		{"after refill", bucketgrid.ExpireAfterRefill(time.Second), 1400 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newManagerFixture(t, bucketgrid.WithExpiration(tc.expiry))
			if _, err := f.m.Bucket("k", f.config(core.Greedy(10, 10, time.Second))).TryConsume(context.Background(), 4); err != nil {
				t.Fatal(err)
			}
			ttl, ok := f.store.TTL("k")
			if !ok || ttl != tc.want {
				t.Fatalf("TTL %v (present %v), want %v", ttl, ok, tc.want)
			}
		})
	}
}

// ExampleManager shows a distributed bucket per API key on the in-memory
// store; any cas.Store or grid executor works the same way.
func ExampleManager() {
	clk := clock.NewFake(time.Unix(1_800_000_000, 0)) // keeps the output exact; omit for the wall clock
	m := bucketgrid.NewManager(cas.New(memstore.New(), cas.WithClock(clk)),
		bucketgrid.WithExpiration(bucketgrid.ExpireAfterRefill(time.Minute)))
	plan := func(context.Context) (core.Config, error) {
		// runs only when the bucket does not exist yet: look up the client's plan here
		return core.NewConfig(core.Greedy(3, 3, time.Minute))
	}
	b := m.Bucket("api-key:alice", plan)
	ctx := context.Background()
	for i := 0; i < 4; i++ {
		p, err := b.TryConsumeAndReturnRemaining(ctx, 1)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(p.Consumed, p.Remaining, p.WaitForRefill)
	}
	// Output:
	// true 2 0s
	// true 1 0s
	// true 0 0s
	// false 0 20s
}

func TestVerboseProbeMatchesStateAfterConsumption(t *testing.T) {
	f := newManagerFixture(t)
	ctx := context.Background()
	cfg, _ := core.NewConfig(core.Greedy(10, 10, time.Second).WithID("s"), core.Greedy(100, 100, time.Minute).WithID("m"))
	local, err := bucketgrid.NewLocal(cfg, bucketgrid.WithClock(f.clock))
	if err != nil {
		t.Fatal(err)
	}
	h := f.m.Bucket("k", func(context.Context) (core.Config, error) { return cfg, nil })
	for _, b := range []bucketgrid.Bucket{local, h} {
		v, err := b.TryConsumeAndReturnRemainingVerbose(ctx, 4)
		p, d := v.Probe, v.Diagnostics
		if err != nil {
			t.Fatal(err)
		}
		if !p.Consumed || p.Remaining != 6 || d.Available[0] != 6 || d.Available[1] != 96 || len(d.State.Config.Bandwidths) != 2 {
			t.Fatalf("%T: probe %+v, available %v", b, p, d.Available)
		}
		if _, err := b.TryConsumeAndReturnRemainingVerbose(ctx, 0); !errors.Is(err, bucketgrid.ErrTokens) {
			t.Fatalf("%T: n=0: %v", b, err)
		}
	}
}
