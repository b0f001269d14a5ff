package tck

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/core"
)

var executorChecks = []check{
	{name: "SameResultsAsModel", run: checkSameResults},
	{name: "SingleInitialisation", run: checkSingleInit},
	{name: "ExactAccountingUnderContention", run: checkContention},
	{name: "RateBounds", run: checkRateBounds},
	{name: "Linearizable", run: checkLinearizable},
	{name: "Recovery", needs: "delete", run: checkRecovery},
	{name: "ImplicitReplacementRace", run: checkReplacementRace},
	{name: "Expiration", needs: "ttl", run: checkExpiration},
	{name: "Removal", needs: "delete", run: checkRemoval},
	{name: "CancelledContext", run: checkCancelled},
}

// handles returns one handle per executor on key, each through its own
// Manager, as separate nodes would hold them.
func (e *env) handles(key string, cfg func(context.Context) (core.Config, error), opts ...bucketgrid.HandleOption) []*bucketgrid.Handle {
	return e.handlesOf(key, cfg, nil, opts...)
}

// handlesOf is handles with Managers made with managerOpts.
func (e *env) handlesOf(key string, cfg func(context.Context) (core.Config, error), managerOpts []bucketgrid.ManagerOption, opts ...bucketgrid.HandleOption) []*bucketgrid.Handle {
	hs := make([]*bucketgrid.Handle, len(e.execs))
	for i, x := range e.execs {
		hs[i] = bucketgrid.NewManager(x, managerOpts...).Bucket(key, cfg, opts...)
	}
	return hs
}

var modelConfigs = []struct {
	name string
	bws  []core.Bandwidth
}{
	{"greedy", []core.Bandwidth{core.Greedy(50, 10, time.Second)}},
	{"intervally", []core.Bandwidth{core.Intervally(40, 15, 700*time.Millisecond)}},
	{"two bandwidths", []core.Bandwidth{
		core.Greedy(20, 20, time.Second).WithID("burst"),
		core.Greedy(100, 100, time.Minute).WithID("sustained")}},
	{"initial tokens", []core.Bandwidth{core.Greedy(30, 7, 300*time.Millisecond).WithInitialTokens(3)}},
}

// checkSameResults drives the executors and a local bucket through the same
// random script at the same fake times and compares every result, error,
// listener event and wait: every Bucket method, the blocking ones and the
// verbose probe included, with token counts now and then above a capacity.
// The handles' Managers wait on the kit's fake clock, so a blocking call
// advances it by exactly its wait; the local bucket has a fake clock of its
// own, set to the kit's before each step, and must advance it as much.
func checkSameResults(e *env) {
	for ci, mc := range modelConfigs {
		cfg, err := core.NewConfig(mc.bws...)
		if err != nil {
			e.Fatalf("%s: %v", mc.name, err)
		}
		hcl, lcl := new(countingListener), new(countingListener)
		hs := e.handlesOf(e.key(fmt.Sprintf("model-%d", ci)), staticConfig(mc.bws...),
			[]bucketgrid.ManagerOption{bucketgrid.WithClock(e.clock), bucketgrid.WithListener(hcl)})
		rng := rand.New(rand.NewPCG(uint64(ci), 42))
		lclk := clock.NewFake(start)
		var local *bucketgrid.Local
		for step := 0; step < 120; step++ {
			e.clock.Advance(time.Duration(rng.Int64N(int64(150 * time.Millisecond))))
			lclk.Set(time.Unix(0, e.clock.Now()))
			if local == nil { // created when the distributed bucket is: at the first call
				if local, err = bucketgrid.NewLocal(cfg.Clone(), bucketgrid.WithClock(lclk), bucketgrid.WithListener(lcl)); err != nil {
					e.Fatalf("NewLocal: %v", err)
				}
			}
			h := hs[step%len(hs)]
			n := 1 + rng.Int64N(12)
			if rng.IntN(8) == 0 {
				n = 1 + rng.Int64N(120) // often above a capacity
			}
			var got, want string
			both := func(f func(b bucketgrid.Bucket) string) {
				t0 := e.clock.Now()
				got = f(h) + fmt.Sprintf(", waited %v", time.Duration(e.clock.Now()-t0))
				want = f(local) + fmt.Sprintf(", waited %v", time.Duration(lclk.Now()-t0))
			}
			switch op := rng.IntN(14); op {
			case 0, 1:
				both(func(b bucketgrid.Bucket) string { return fmt.Sprint(b.TryConsume(e.ctx, n)) })
			case 2, 3:
				both(func(b bucketgrid.Bucket) string { return fmt.Sprint(b.TryConsumeAndReturnRemaining(e.ctx, n)) })
			case 4:
				both(func(b bucketgrid.Bucket) string { return fmt.Sprint(b.EstimateAbilityToConsume(e.ctx, n)) })
			case 5:
				both(func(b bucketgrid.Bucket) string { return fmt.Sprint(b.TryConsumeAsMuchAsPossible(e.ctx, n)) })
			case 6:
				both(func(b bucketgrid.Bucket) string { return fmt.Sprint(b.AddTokens(e.ctx, n)) })
			case 7:
				both(func(b bucketgrid.Bucket) string { return fmt.Sprint(b.ConsumeIgnoringRateLimits(e.ctx, n)) })
			case 8:
				both(func(b bucketgrid.Bucket) string { return fmt.Sprint(b.AvailableTokens(e.ctx)) })
			case 9:
				if rng.IntN(4) == 0 {
					both(func(b bucketgrid.Bucket) string { return fmt.Sprint(b.ForceAddTokens(e.ctx, n)) })
				} else {
					both(func(b bucketgrid.Bucket) string { return fmt.Sprint(b.Reset(e.ctx)) })
				}
			case 10:
				both(func(b bucketgrid.Bucket) string { return fmt.Sprint(b.Consume(e.ctx, n)) })
			case 11:
				// Consume under a deadline an hour away (wall time), far
				// from the fake clock's waits
				both(func(b bucketgrid.Bucket) string {
					ctx, cancel := context.WithTimeout(e.ctx, time.Hour)
					defer cancel()
					err := b.Consume(ctx, n)
					return fmt.Sprint(errors.Is(err, context.DeadlineExceeded), errors.Is(err, bucketgrid.ErrExceedsCapacity), err == nil)
				})
			case 12, 13:
				both(func(b bucketgrid.Bucket) string {
					v, err := b.TryConsumeAndReturnRemainingVerbose(e.ctx, n)
					d := v.Diagnostics
					return fmt.Sprint(v.Probe, d.Available, d.TimeToFull, d.State.Bands, v.Share, err)
				})
			}
			got += fmt.Sprintf("; events %d consumed, %d rejected, %v parked", hcl.Consumed(), hcl.Rejected(), hcl.Parked())
			want += fmt.Sprintf("; events %d consumed, %d rejected, %v parked", lcl.Consumed(), lcl.Rejected(), lcl.Parked())
			if got != want {
				e.Fatalf("%s, step %d (executor %d, n=%d): got %s, the local bucket says %s", mc.name, step, step%len(hs), n, got, want)
			}
		}
		// the stored state itself must equal the local bucket's
		d, err := hs[0].Diagnose(e.ctx)
		if err != nil {
			e.Fatalf("%s: Diagnose: %v", mc.name, err)
		}
		ld, _ := local.Diagnose(e.ctx)
		if fmt.Sprint(d.Available) != fmt.Sprint(ld.Available) || d.TimeToFull != ld.TimeToFull {
			e.Errorf("%s: stored bucket %v (full in %v), the local bucket %v (full in %v)", mc.name,
				d.Available, d.TimeToFull, ld.Available, ld.TimeToFull)
		}
	}
	// replacement through the executor equals the model's
	old, _ := core.NewConfig(core.Greedy(100, 10, time.Minute))
	repl, _ := core.NewConfig(core.Greedy(200, 10, time.Minute))
	for _, s := range []core.TokensInheritance{core.InheritProportionally, core.InheritAsIs, core.InheritReset, core.InheritAdditive} {
		h := e.handles(e.key("replace-"+s.String()), staticConfig(old.Bandwidths...))[0]
		now := e.clock.Now()
		model := core.NewState(old.Clone(), now)
		if _, err := h.TryConsume(e.ctx, 60); err != nil {
			e.Fatalf("%v: %v", s, err)
		}
		model.TryConsume(60, now)
		if err := h.ReplaceConfiguration(e.ctx, repl, s); err != nil {
			e.Fatalf("ReplaceConfiguration %v: %v", s, err)
		}
		model.ReplaceConfiguration(repl.Clone(), s, now)
		got, err := h.AvailableTokens(e.ctx)
		if want := model.AvailableTokens(now); err != nil || got != want {
			e.Errorf("after ReplaceConfiguration(%v): %d tokens (err %v), the model says %d", s, got, err, want)
		}
	}
	// an invalid configuration is rejected before anything is written
	h := e.handles(e.key("invalid"), staticConfig(core.Greedy(10, 1, time.Second)))[0]
	if _, err := h.TryConsume(e.ctx, 1); err != nil {
		e.Fatalf("TryConsume: %v", err)
	}
	bad := core.Config{Bandwidths: []core.Bandwidth{core.Greedy(0, 1, time.Second)}}
	if err := h.ReplaceConfiguration(e.ctx, bad, core.InheritAsIs); err == nil {
		e.Errorf("ReplaceConfiguration with capacity 0 succeeded")
	}
	if n, err := h.AvailableTokens(e.ctx); err != nil || n != 9 {
		e.Errorf("after a rejected replacement: %d tokens (err %v), want 9", n, err)
	}
	if _, err := h.TryConsume(e.ctx, 0); err == nil {
		e.Errorf("TryConsume(0) succeeded; non-positive token counts must be rejected")
	}
	if w, err := h.ConsumeIgnoringRateLimits(e.ctx, math.MaxInt64); err == nil {
		e.Errorf("an overdraft of MaxInt64 tokens was accepted (wait %v)", w)
	}
}

// countingListener counts a bucket's events, so that a Handle's can be
// compared with a Local's.
type countingListener struct {
	consumed, rejected, parked, interrupted atomic.Int64
}

// OnConsumed adds tokens to the consumed count.
func (l *countingListener) OnConsumed(tokens int64) { l.consumed.Add(tokens) }

// OnRejected adds tokens to the rejected count.
func (l *countingListener) OnRejected(tokens int64) { l.rejected.Add(tokens) }

// OnParked adds d to the parked time.
func (l *countingListener) OnParked(d time.Duration) { l.parked.Add(int64(d)) }

// OnInterrupted counts one interruption.
func (l *countingListener) OnInterrupted(error) { l.interrupted.Add(1) }

// Consumed returns the tokens consumed so far.
func (l *countingListener) Consumed() int64 { return l.consumed.Load() }

// Rejected returns the tokens rejected so far.
func (l *countingListener) Rejected() int64 { return l.rejected.Load() }

// Parked returns the total time blocking operations announced they would
// wait (the sum of OnParked's d), including waits later interrupted.
func (l *countingListener) Parked() time.Duration { return time.Duration(l.parked.Load()) }

// Interrupted returns the number of interrupted waits.
func (l *countingListener) Interrupted() int64 { return l.interrupted.Load() }
