package bucketgrid_test

import (
	"context"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/cas/memstore"
	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/core/wire"
)

// sixtyAMinute is the operator's limit: 60 a minute, one a second.
func sixtyAMinute(context.Context) (core.Config, error) {
	return core.NewConfig(core.Greedy(60, 60, time.Minute))
}

// fleet is three instances (Managers with degrade) sharing one store.
type fleet struct {
	clock *clock.Fake
	store *outageStore
	ms    []*bucketgrid.Manager
}

func newFleet(t *testing.T) *fleet {
	t.Helper()
	f := &fleet{clock: clock.NewFake(time.Unix(1_800_000_000, 0))}
	f.store = &outageStore{Store: memstore.New(memstore.WithClock(f.clock))}
	for range 3 {
		m := bucketgrid.NewManager(cas.New(f.store, cas.WithClock(f.clock)), bucketgrid.WithClock(f.clock),
			bucketgrid.WithDegrade(bucketgrid.Degrade{Instances: func() int { return 3 },
				Timeout: storeWait}.Tuned(2, time.Hour, 0)))
		t.Cleanup(func() { m.Close() })
		f.ms = append(f.ms, m)
	}
	return f
}

// check is one request's check on an instance, as the service makes it
// (remaining) or as a middleware that only asks yes or no does (try).
// Both go through Handle.Execute, which says how the check was decided (the
// share it was cut for, 0 by the executor).
type check func(ctx context.Context, h *bucketgrid.Handle) (ok bool, share int, err error)

var checks = map[string]check{
	"remaining": func(ctx context.Context, h *bucketgrid.Handle) (bool, int, error) {
		res, share, err := h.Execute(ctx, wire.Op{Kind: wire.OpTryConsumeAndReturnRemaining, Tokens: 1})
		if err != nil {
			return false, 0, err
		}
		return res[0].OK, share, nil
	},
	"try": func(ctx context.Context, h *bucketgrid.Handle) (bool, int, error) { return tryConsume(ctx, h, 1) },
}

// drain checks round robin on every instance until each has been refused
// once; it returns how many were admitted.
func (f *fleet) drain(t *testing.T, c check, wantDegraded bool) int {
	t.Helper()
	admitted, refused := 0, make([]bool, len(f.ms))
	for i := 0; i < 1000; i++ {
		n := i % len(f.ms)
		ok, share, err := c(context.Background(), f.ms[n].Bucket("client", sixtyAMinute))
		if err != nil {
			t.Fatalf("check %d: %v", i, err)
		}
		if (share > 0) != wantDegraded {
			t.Fatalf("check %d: share %d, want degraded %v", i, share, wantDegraded)
		}
		if ok {
			admitted++
			continue
		}
		refused[n] = true
		if refused[0] && refused[1] && refused[2] {
			return admitted
		}
	}
	t.Fatalf("the fleet never refused")
	return 0
}

func TestDegradeShareStartsFromWhatWasSeen(t *testing.T) {
	// The operator's outage: a 60/min window used up through 3 instances,
	// then the store hangs. Each instance last saw the key empty, so the
	// fleet admits what the refill allows and no more: nothing at once, at
	// most 30 (+ one per instance for rounding) half a minute later. Fresh
	// shares of 20 each would admit 60 at once.
	for name, c := range checks {
		t.Run(name, func(t *testing.T) {
			f := newFleet(t)
			if got := f.drain(t, c, false); got != 60 {
				t.Fatalf("the fleet admitted %d of a 60/min window with the store up, want 60", got)
			}
			f.store.mode.Store(storeHangs)
			if got := f.drain(t, c, true); got != 0 {
				t.Fatalf("the store hung after the window was used up: the fleet admitted %d more at once, want 0", got)
			}
			f.clock.Advance(30 * time.Second)
			if got := f.drain(t, c, true); got > 30+3 {
				t.Fatalf("30 s into the outage the fleet admitted %d, want at most the refill, 30 (+3)", got)
			}
		})
	}
}

func TestDegradeWindowShareStartsFromWhatWasSeen(t *testing.T) {
	// A fixed window (an aligned bandwidth refilled at each day's
	// boundary) used up, then the store hangs: each instance's share starts
	// spent, as the window is until its next boundary, however long ago
	// its first boundary was.
	epoch := time.Unix(0, 0)
	day := func(context.Context) (core.Config, error) {
		return core.NewConfig(core.IntervallyAligned(60, 60, 24*time.Hour, epoch))
	}
	f := newFleet(t)
	ctx := context.Background()
	drain := func(wantDegraded bool) int {
		admitted := 0
		for i := range 90 {
			res, share, err := f.ms[i%3].Bucket("client", day).Execute(ctx,
				wire.Op{Kind: wire.OpTryConsumeAndReturnRemaining, Tokens: 1})
			if err != nil || (share > 0) != wantDegraded {
				t.Fatalf("check %d: %v, share %d, want degraded %v", i, err, share, wantDegraded)
			}
			if res[0].OK {
				admitted++
			}
		}
		return admitted
	}
	if got := drain(false); got != 60 {
		t.Fatalf("the store admitted %d of the day's 60, want 60", got)
	}
	f.store.mode.Store(storeHangs)
	if got := drain(true); got != 0 {
		t.Fatalf("the store hung after the day's window was used up: the fleet admitted %d more, want 0", got)
	}
}

func TestDegradeUnseenKeyGetsTheShare(t *testing.T) {
	// A key this instance never saw answered starts from the configured
	// share: a client new to the instance (or an instance just started) is
	// not refused for the length of the outage.
	f := newFleet(t)
	f.store.mode.Store(storeHangs)
	if got := f.drain(t, checks["remaining"], true); got != 60 {
		t.Fatalf("the fleet admitted %d of a key none had seen, want 3 shares of 20", got)
	}
}

func TestDegradeShareFromPartlyUsedWindow(t *testing.T) {
	// 30 of 60 used, then the store is down: each of the 3 instances last
	// saw about 30 left and takes a third of it, not a full share of 20.
	f := newFleet(t)
	ctx := context.Background()
	for i := range 30 {
		p, err := f.ms[i%3].Bucket("client", sixtyAMinute).TryConsumeAndReturnRemaining(ctx, 1)
		if err != nil || !p.Consumed {
			t.Fatalf("check %d with the store up: %+v %v", i, p, err)
		}
	}
	f.store.mode.Store(storeDown)
	// the instances saw 32, 31 and 30 left (⌊/3⌋: 10 each)
	if got := f.drain(t, checks["remaining"], true); got != 30 {
		t.Fatalf("the fleet admitted %d of the 30 left, want 30", got)
	}
}
