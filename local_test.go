package bucketgrid

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/core"
)

var t0 = time.Date(2026, 11, 30, 16, 20, 0, 0, time.UTC)

// newTestLocal returns a local bucket of bws on a fake clock at t0, with a
// counting listener.
func newTestLocal(t *testing.T, bws ...core.Bandwidth) (*Local, *clock.Fake, *CountingListener) {
	t.Helper()
	cfg, err := core.NewConfig(bws...)
	if err != nil {
		t.Fatalf("NewConfig: %v", err)
	}
	clk := clock.NewFake(t0)
	var cl CountingListener
	l, err := NewLocal(cfg, WithClock(clk), WithListener(&cl))
	if err != nil {
		t.Fatalf("NewLocal: %v", err)
	}
	return l, clk, &cl
}

func available(t *testing.T, l *Local) int64 {
	t.Helper()
	n, err := l.AvailableTokens(context.Background())
	if err != nil {
		t.Fatalf("AvailableTokens: %v", err)
	}
	return n
}

func TestNewLocalValidates(t *testing.T) {
	aligned := core.Config{Bandwidths: []core.Bandwidth{core.IntervallyAligned(10, 10, time.Hour, t0.Add(time.Hour))}}
	tests := []struct {
		name string
		cfg  core.Config
		opts []Option
		want error // nil: valid
	}{
		{"no bandwidths", core.Config{}, nil, core.ErrNoBandwidths},
		{"zero capacity", core.Config{Bandwidths: []core.Bandwidth{core.Greedy(0, 1, time.Second)}}, nil, core.ErrCapacity},
		{"too fast", core.Config{Bandwidths: []core.Bandwidth{core.Greedy(10, 2, time.Nanosecond)}}, nil, core.ErrRefillTooFast},
		{"aligned on monotonic clock", aligned, nil, core.ErrNeedsWallClock},
		{"aligned on explicit monotonic clock", aligned, []Option{WithClock(clock.Monotonic())}, core.ErrNeedsWallClock},
		{"aligned on wall clock", aligned, []Option{WithClock(clock.Wall())}, nil},
		{"aligned on millis clock", aligned, []Option{WithClock(clock.WallMillis())}, nil},
		{"aligned on fake clock", aligned, []Option{WithClock(clock.NewFake(t0))}, nil},
		{"greedy on default clock", core.Config{Bandwidths: []core.Bandwidth{core.Greedy(10, 1, time.Second)}}, nil, nil},
		{"nil clock and listener", core.Config{Bandwidths: []core.Bandwidth{core.Greedy(10, 1, time.Second)}},
			[]Option{WithClock(nil), WithListener(nil)}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := NewLocal(tt.cfg, tt.opts...)
			if tt.want == nil {
				if err != nil || l == nil {
					t.Fatalf("NewLocal = %v, %v; want a bucket", l, err)
				}
				if ok, err := l.TryConsume(context.Background(), 1); !ok || err != nil {
					t.Fatalf("TryConsume on a new bucket = %v, %v", ok, err)
				}
				return
			}
			var ce *core.ConfigError
			if l != nil || !errors.Is(err, tt.want) || !errors.As(err, &ce) {
				t.Fatalf("NewLocal = %v, %v; want a *core.ConfigError wrapping %v", l, err, tt.want)
			}
		})
	}
}

func TestNewLocalCopiesConfig(t *testing.T) {
	bws := []core.Bandwidth{core.Greedy(10, 1, time.Second)}
	l, err := NewLocal(core.Config{Bandwidths: bws}, WithClock(clock.NewFake(t0)))
	if err != nil {
		t.Fatal(err)
	}
	bws[0].Capacity = 1000
	d, _ := l.Diagnose(context.Background())
	if got := d.State.Config.Bandwidths[0].Capacity; got != 10 {
		t.Fatalf("capacity after the caller changed its slice = %d, want 10", got)
	}
}

func TestLocalNonPositiveTokens(t *testing.T) {
	l, _, cl := newTestLocal(t, core.Greedy(10, 10, time.Second))
	ctx := context.Background()
	calls := map[string]func(n int64) error{
		"TryConsume": func(n int64) error { _, err := l.TryConsume(ctx, n); return err },
		"TryConsumeAndReturnRemaining": func(n int64) error {
			_, err := l.TryConsumeAndReturnRemaining(ctx, n)
			return err
		},
		"EstimateAbilityToConsume": func(n int64) error { _, err := l.EstimateAbilityToConsume(ctx, n); return err },
		"TryConsumeAsMuchAsPossible": func(n int64) error {
			_, err := l.TryConsumeAsMuchAsPossible(ctx, n)
			return err
		},
		"AddTokens":      func(n int64) error { return l.AddTokens(ctx, n) },
		"ForceAddTokens": func(n int64) error { return l.ForceAddTokens(ctx, n) },
		"ConsumeIgnoringRateLimits": func(n int64) error {
			_, err := l.ConsumeIgnoringRateLimits(ctx, n)
			return err
		},
		"Consume": func(n int64) error { return l.Consume(ctx, n) },
	}
	for name, call := range calls {
		for _, n := range []int64{0, -1, math.MinInt64} {
			if err := call(n); !errors.Is(err, ErrTokens) {
				t.Errorf("%s(%d) = %v, want ErrTokens", name, n, err)
			}
		}
	}
	if got := available(t, l); got != 10 {
		t.Fatalf("tokens after invalid calls = %d, want 10", got)
	}
	if cl.Consumed()+cl.Rejected()+cl.Interrupted() != 0 || cl.Parked() != 0 {
		t.Fatal("invalid calls reported events")
	}
}

func TestLocalOperations(t *testing.T) {
	ctx := context.Background()
	ms := time.Millisecond
	// 10 tokens, greedy 10/s: one token per 100 ms.
	l, clk, cl := newTestLocal(t, core.Greedy(10, 10, time.Second))

	steps := []struct {
		name string
		do   func(t *testing.T)
	}{
		{"consume 4", func(t *testing.T) {
			if ok, err := l.TryConsume(ctx, 4); !ok || err != nil {
				t.Fatalf("TryConsume(4) = %v, %v", ok, err)
			}
		}},
		{"probe 6 consumed", func(t *testing.T) {
			p, err := l.TryConsumeAndReturnRemaining(ctx, 6)
			want := core.Probe{Consumed: true, Remaining: 0, WaitForReset: time.Second}
			if err != nil || p != want {
				t.Fatalf("probe = %+v, %v; want %+v", p, err, want)
			}
		}},
		{"probe 2 rejected", func(t *testing.T) {
			p, _ := l.TryConsumeAndReturnRemaining(ctx, 2)
			want := core.Probe{Remaining: 0, WaitForRefill: 200 * ms, WaitForReset: time.Second}
			if p != want {
				t.Fatalf("probe = %+v, want %+v", p, want)
			}
		}},
		{"probe above capacity never", func(t *testing.T) {
			p, _ := l.TryConsumeAndReturnRemaining(ctx, 11)
			if p.Consumed || p.WaitForRefill != math.MaxInt64 {
				t.Fatalf("probe = %+v, want a wait of math.MaxInt64", p)
			}
		}},
		{"estimate after 250ms", func(t *testing.T) {
			clk.Advance(250 * ms)
			e, _ := l.EstimateAbilityToConsume(ctx, 3)
			want := core.Estimate{Remaining: 2, WaitForRefill: 50 * ms}
			if e != want {
				t.Fatalf("estimate = %+v, want %+v", e, want)
			}
			if e, _ := l.EstimateAbilityToConsume(ctx, 2); !e.CanBeConsumed || e.Remaining != 2 {
				t.Fatalf("estimate(2) = %+v", e)
			}
		}},
		{"as much as possible", func(t *testing.T) {
			if n, _ := l.TryConsumeAsMuchAsPossible(ctx, 1); n != 1 {
				t.Fatalf("limit 1 took %d", n)
			}
			if n, _ := l.TryConsumeAsMuchAsPossible(ctx, math.MaxInt64); n != 1 {
				t.Fatalf("no limit took %d, want 1", n)
			}
			if n, _ := l.TryConsumeAsMuchAsPossible(ctx, math.MaxInt64); n != 0 {
				t.Fatalf("empty bucket gave %d", n)
			}
		}},
		{"add capped", func(t *testing.T) {
			if err := l.AddTokens(ctx, 100); err != nil {
				t.Fatal(err)
			}
			if got := available(t, l); got != 10 {
				t.Fatalf("after AddTokens(100) = %d, want the capacity 10", got)
			}
		}},
		{"force add beyond capacity, no refill above it", func(t *testing.T) {
			if err := l.ForceAddTokens(ctx, 5); err != nil {
				t.Fatal(err)
			}
			clk.Advance(time.Hour)
			if got := available(t, l); got != 15 {
				t.Fatalf("after ForceAddTokens(5) and an hour = %d, want 15", got)
			}
		}},
		{"overdraft", func(t *testing.T) {
			d, err := l.ConsumeIgnoringRateLimits(ctx, 25)
			if err != nil || d != time.Second {
				t.Fatalf("ConsumeIgnoringRateLimits(25) = %v, %v; want 1s", d, err)
			}
			if got := available(t, l); got != -10 {
				t.Fatalf("in overdraft = %d, want -10", got)
			}
			if ok, _ := l.TryConsume(ctx, 1); ok {
				t.Fatal("consumed during an overdraft")
			}
		}},
		{"reset", func(t *testing.T) {
			if err := l.Reset(ctx); err != nil {
				t.Fatal(err)
			}
			if got := available(t, l); got != 10 {
				t.Fatalf("after Reset = %d", got)
			}
		}},
		{"replace proportionally", func(t *testing.T) {
			l.TryConsume(ctx, 6)
			cfg, _ := core.NewConfig(core.Greedy(20, 10, time.Second))
			if err := l.ReplaceConfiguration(ctx, cfg, core.InheritProportionally); err != nil {
				t.Fatal(err)
			}
			if got := available(t, l); got != 8 {
				t.Fatalf("after PROPORTIONALLY 10→20 with 4 = %d, want 8", got)
			}
		}},
		{"replace rejects invalid", func(t *testing.T) {
			bad := core.Config{Bandwidths: []core.Bandwidth{core.Greedy(-1, 1, time.Second)}}
			if err := l.ReplaceConfiguration(ctx, bad, core.InheritAsIs); !errors.Is(err, core.ErrCapacity) {
				t.Fatalf("invalid config: %v", err)
			}
			aligned := core.Config{Bandwidths: []core.Bandwidth{core.IntervallyAligned(10, 10, time.Hour, t0)}}
			if err := l.ReplaceConfiguration(ctx, aligned, core.InheritAsIs); err != nil {
				t.Fatalf("aligned on a fake (wall) clock: %v", err)
			}
			cfg, _ := core.NewConfig(core.Greedy(20, 10, time.Second))
			if err := l.ReplaceConfiguration(ctx, cfg, core.TokensInheritance(9)); !errors.Is(err, core.ErrUnknownStrategy) {
				t.Fatalf("unknown strategy: %v", err)
			}
		}},
		{"diagnose", func(t *testing.T) {
			d, err := l.Diagnose(ctx)
			if err != nil || len(d.Available) != 1 || d.Available[0] != 8 || d.State.Config.Bandwidths[0].Style != core.RefillIntervallyAligned {
				t.Fatalf("Diagnose = %+v, %v", d, err)
			}
			d.State.Bands[0].Size = 1000 // a copy: must not reach the bucket
			if got := available(t, l); got != 8 {
				t.Fatalf("Diagnose snapshot aliases the bucket: %d", got)
			}
		}},
	}
	for _, s := range steps {
		if !t.Run(s.name, s.do) {
			return
		}
	}
	// consumed: 4+6+1+1+25+6; rejected: 2+11+1
	if cl.Consumed() != 43 || cl.Rejected() != 14 {
		t.Fatalf("listener consumed %d rejected %d, want 43 and 14", cl.Consumed(), cl.Rejected())
	}
}

func TestLocalOverdraftTooLarge(t *testing.T) {
	// One token per (2^63-1)/2 ns: owing 3 tokens would take longer than
	// int64 nanoseconds, owing 2 just fits.
	l, _, cl := newTestLocal(t, core.Greedy(1, 1, math.MaxInt64/2))
	ctx := context.Background()
	if _, err := l.ConsumeIgnoringRateLimits(ctx, 4); !errors.Is(err, ErrOverdraftTooLarge) {
		t.Fatalf("ConsumeIgnoringRateLimits(3) = %v, want ErrOverdraftTooLarge", err)
	}
	if got := available(t, l); got != 1 {
		t.Fatalf("refused overdraft took tokens: %d left", got)
	}
	if cl.Consumed() != 0 {
		t.Fatal("refused overdraft reported consumption")
	}
	if d, err := l.ConsumeIgnoringRateLimits(ctx, 3); err != nil || d != math.MaxInt64-1 {
		t.Fatalf("ConsumeIgnoringRateLimits(3) = %v, %v; want 2^63-2 ns", d, err)
	}
}

func TestLocalConsumeBeyondInt64Wait(t *testing.T) {
	// 2 tokens, one per (2^63-1)/2 ns: after an overdraft of 1, three more
	// tokens would take longer than int64 nanoseconds.
	l, clk, cl := newTestLocal(t, core.Greedy(2, 1, math.MaxInt64/2))
	ctx := context.Background()
	if _, err := l.ConsumeIgnoringRateLimits(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if err := l.Consume(ctx, 2); !errors.Is(err, ErrOverdraftTooLarge) {
		t.Fatalf("Consume = %v, want ErrOverdraftTooLarge", err)
	}
	hour, cancel := context.WithTimeout(ctx, time.Hour)
	defer cancel()
	if err := l.Consume(hour, 2); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Consume under a deadline = %v, want DeadlineExceeded", err)
	}
	if got := available(t, l); got != -1 || clk.Now() != t0.UnixNano() || cl.Parked() != 0 {
		t.Fatalf("refused waits changed the bucket (%d tokens) or the clock", got)
	}
}

func TestLocalConsumeParksExactly(t *testing.T) {
	ctx := context.Background()
	l, clk, cl := newTestLocal(t, core.Greedy(10, 10, time.Second).WithInitialTokens(0))
	if err := l.Consume(ctx, 3); err != nil {
		t.Fatalf("Consume(3) = %v", err)
	}
	if got, want := time.Duration(clk.Now()-t0.UnixNano()), 300*time.Millisecond; got != want || cl.Parked() != want {
		t.Fatalf("waited %v (parked %v), want %v", got, cl.Parked(), want)
	}
	if cl.Consumed() != 3 || available(t, l) != 0 {
		t.Fatalf("consumed %d, %d left", cl.Consumed(), available(t, l))
	}
	// 10 tokens at once on an empty bucket: wait one full second.
	if err := l.Consume(ctx, 10); err != nil {
		t.Fatal(err)
	}
	if got, want := cl.Parked(), 1300*time.Millisecond; got != want {
		t.Fatalf("parked %v, want %v", got, want)
	}
	// tokens available now: no parking
	clk.Advance(time.Second)
	if err := l.Consume(ctx, 10); err != nil || cl.Parked() != 1300*time.Millisecond {
		t.Fatalf("Consume with tokens present = %v, parked %v", err, cl.Parked())
	}
}

// TestLocalConsumeUnderDeadline: Consume waits for tokens due before its
// context's deadline and refuses the others at once (a rejection), taking
// nothing; above a capacity it fails without an event. Deadlines are wall
// time, far from the waits on the fake clock either way.
func TestLocalConsumeUnderDeadline(t *testing.T) {
	ctx := context.Background()
	ms := time.Millisecond
	tests := []struct {
		name     string
		n        int64
		deadline time.Duration
		err      error
		waited   time.Duration
	}{
		{"immediately", 0, time.Minute, nil, 0}, // n=0 replaced below by the present tokens
		{"within", 5, time.Minute, nil, 500 * ms},
		{"past the deadline", 6, 300 * ms, context.DeadlineExceeded, 0},
		{"above capacity", 11, time.Hour, ErrExceedsCapacity, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, clk, cl := newTestLocal(t, core.Greedy(10, 10, time.Second).WithInitialTokens(0))
			n := tt.n
			if n == 0 {
				clk.Advance(time.Second)
				n = 10
			}
			before, start := available(t, l), clk.Now()
			dctx, cancel := context.WithTimeout(ctx, tt.deadline)
			defer cancel()
			err := l.Consume(dctx, n)
			if !errors.Is(err, tt.err) || (tt.err == nil) != (err == nil) {
				t.Fatalf("Consume(%d) under a %v deadline = %v; want %v", n, tt.deadline, err, tt.err)
			}
			waited := time.Duration(clk.Now() - start)
			if waited != tt.waited || cl.Parked() != tt.waited {
				t.Fatalf("waited %v (parked %v), want %v", waited, cl.Parked(), tt.waited)
			}
			switch {
			case err == nil:
				if cl.Consumed() != n || cl.Rejected() != 0 {
					t.Fatalf("events: consumed %d rejected %d", cl.Consumed(), cl.Rejected())
				}
			case errors.Is(err, context.DeadlineExceeded):
				if cl.Rejected() != n || available(t, l) != before {
					t.Fatalf("rejection: rejected %d, tokens %d→%d", cl.Rejected(), before, available(t, l))
				}
			default:
				if cl.Rejected()+cl.Consumed() != 0 || available(t, l) != before {
					t.Fatal("an erroneous call changed the bucket or reported events")
				}
			}
		})
	}
	l, _, _ := newTestLocal(t, core.Greedy(10, 10, time.Second), core.Greedy(5, 5, time.Second))
	if err := l.Consume(ctx, 6); !errors.Is(err, ErrExceedsCapacity) {
		t.Fatalf("Consume above the smaller capacity = %v, want ErrExceedsCapacity", err)
	}
}

// blockingClock is a fake clock whose Sleep blocks until its context ends,
// after announcing that it sleeps.
type blockingClock struct {
	*clock.Fake
	sleeping chan time.Duration
}

func (c blockingClock) Sleep(ctx context.Context, d time.Duration) error {
	c.sleeping <- d
	<-ctx.Done()
	return ctx.Err()
}

func TestLocalConsumeCancelledGivesTokensBack(t *testing.T) {
	cfg, _ := core.NewConfig(core.Greedy(10, 10, time.Second).WithInitialTokens(4))
	clk := blockingClock{clock.NewFake(t0), make(chan time.Duration)}
	var cl CountingListener
	l, err := NewLocal(cfg, WithClock(clk), WithListener(&cl))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- l.Consume(ctx, 6) }()
	if d := <-clk.sleeping; d != 200*time.Millisecond {
		t.Fatalf("sleeps %v, want 200ms", d)
	}
	if got := available(t, l); got != -2 {
		t.Fatalf("while parked the reservation holds: %d tokens, want -2", got)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Consume = %v, want context.Canceled", err)
	}
	if got := available(t, l); got != 4 {
		t.Fatalf("after cancellation %d tokens, want the 4 given back", got)
	}
	if cl.Interrupted() != 1 || cl.Consumed() != 0 || cl.Parked() != 200*time.Millisecond {
		t.Fatalf("events: interrupted %d consumed %d parked %v", cl.Interrupted(), cl.Consumed(), cl.Parked())
	}
	// a context that is already done takes nothing and does not park
	if err := l.Consume(ctx, 1); !errors.Is(err, context.Canceled) || available(t, l) != 4 {
		t.Fatalf("Consume on a done context = %v", err)
	}
}

func TestLocalConsumeRealClockDeadline(t *testing.T) {
	cfg, _ := core.NewConfig(core.Greedy(10, 1, time.Hour).WithInitialTokens(0))
	var cl CountingListener
	l, err := NewLocal(cfg, WithListener(&cl))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := l.Consume(ctx, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Consume = %v, want DeadlineExceeded", err)
	}
	// on a loaded machine the deadline may pass before Consume starts: then
	// nothing is reserved and nothing interrupted
	if got := available(t, l); got != 0 || cl.Interrupted() > 1 || (cl.Interrupted() == 1) != (cl.Parked() > 0) {
		t.Fatalf("after the deadline %d tokens, %d interruptions, parked %v", got, cl.Interrupted(), cl.Parked())
	}
	// a short real wait completes, and not before the token is due: the
	// bucket is created after start, so its token comes 2ms or more after
	// start however the test is scheduled
	cfg2, _ := core.NewConfig(core.Greedy(1, 1, 2*time.Millisecond).WithInitialTokens(0))
	start := time.Now()
	l2, _ := NewLocal(cfg2, WithClock(clock.Monotonic()))
	minute, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := l2.Consume(minute, 1); err != nil {
		t.Fatalf("Consume = %v", err)
	}
	if took := time.Since(start); took < 2*time.Millisecond {
		t.Fatalf("returned %v after the bucket was created, before its token was due", took)
	}
}

func TestLocalContendedExactTotals(t *testing.T) {
	const goroutines, each, capacity = 8, 10_000, 50_000
	l, _, cl := newTestLocal(t, core.Greedy(capacity, 1, time.Hour))
	var wg sync.WaitGroup
	counts := make([]int64, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				if ok, _ := l.TryConsume(context.Background(), 1); ok {
					counts[g]++
				}
			}
		}()
	}
	wg.Wait()
	var total int64
	for _, c := range counts {
		total += c
	}
	if total != capacity || cl.Consumed() != capacity || cl.Rejected() != goroutines*each-capacity {
		t.Fatalf("consumed %d (listener %d, rejected %d), want exactly %d", total, cl.Consumed(), cl.Rejected(), capacity)
	}
	if got := available(t, l); got != 0 {
		t.Fatalf("%d tokens left, want 0", got)
	}
}

func TestLocalContendedMixedOperations(t *testing.T) {
	// Every goroutine takes 1 token and gives 1 back through AddTokens or
	// ForceAddTokens, or reserves through Consume; the fake clock is frozen
	// except for blocking waits. The books must balance exactly.
	l, clk, cl := newTestLocal(t, core.Greedy(1000, 1000, time.Second))
	ctx := context.Background()
	const goroutines, each = 4, 2000
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				switch (g + i) % 4 {
				case 0:
					if ok, _ := l.TryConsume(ctx, 1); ok {
						l.AddTokens(ctx, 1)
					}
				case 1:
					if p, _ := l.TryConsumeAndReturnRemaining(ctx, 2); p.Consumed {
						l.AddTokens(ctx, 2)
					}
				case 2:
					l.EstimateAbilityToConsume(ctx, 1)
					l.AvailableTokens(ctx)
				case 3:
					if err := l.Consume(ctx, 1); err != nil {
						t.Error(err)
					}
				}
			}
		}()
	}
	wg.Wait()
	// 2000 Consume(1) calls on a full 1000 bucket: the clock only moves by
	// blocking waits, and every wait was reported as parked.
	if got := time.Duration(clk.Now() - t0.UnixNano()); got != cl.Parked() {
		t.Fatalf("clock moved %v, parked %v: every advance must be a reported wait", got, cl.Parked())
	}
	if avail := available(t, l); avail > 1000 || avail < 0 {
		t.Fatalf("%d tokens after balanced operations", avail)
	}
}

func TestHotPathsDoNotAllocate(t *testing.T) {
	ctx := context.Background()
	cfg, _ := core.NewConfig(core.Greedy(1<<40, 1_000_000, time.Millisecond))
	l, err := NewLocal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var cl CountingListener
	withListener, _ := NewLocal(cfg, WithListener(&cl))
	paths := map[string]func(){
		"Local.TryConsume":                   func() { l.TryConsume(ctx, 1) },
		"Local.TryConsumeAndReturnRemaining": func() { l.TryConsumeAndReturnRemaining(ctx, 1) },
		"Local.EstimateAbilityToConsume":     func() { l.EstimateAbilityToConsume(ctx, 1) },
		"Local.TryConsume with a listener":   func() { withListener.TryConsume(ctx, 1) },
	}
	for name, f := range paths {
		if n := testing.AllocsPerRun(1000, f); n != 0 {
			t.Errorf("%s allocates %.1f times per call", name, n)
		}
	}
}
