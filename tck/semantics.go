package tck

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/bucketgrid/bucketgrid"
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
func (e *env) handles(key string, cfg bucketgrid.ConfigFunc, opts ...bucketgrid.BucketOption) []*bucketgrid.Handle {
	hs := make([]*bucketgrid.Handle, len(e.execs))
	for i, x := range e.execs {
		hs[i] = bucketgrid.NewManager(x).Bucket(key, cfg, opts...)
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

// checkSameResults drives the executors and core's in-memory model through
// the same random script at the same fake times and compares every result.
func checkSameResults(e *env) {
	for ci, mc := range modelConfigs {
		cfg, err := core.NewConfig(mc.bws...)
		if err != nil {
			e.Fatalf("%s: %v", mc.name, err)
		}
		hs := e.handles(e.key(fmt.Sprintf("model-%d", ci)), staticConfig(mc.bws...))
		rng := rand.New(rand.NewPCG(uint64(ci), 42))
		var model core.Bucket
		created := false
		for step := 0; step < 200; step++ {
			e.clock.Advance(time.Duration(rng.Int64N(int64(150 * time.Millisecond))))
			now := e.clock.Now()
			if !created {
				model, created = core.NewBucket(cfg.Clone(), now), true
			}
			h := hs[step%len(hs)]
			n := 1 + rng.Int64N(12)
			var got, want string
			switch op := rng.IntN(10); op {
			case 0, 1:
				ok, err := h.TryConsume(e.ctx, n)
				got, want = fmt.Sprint(ok, err), fmt.Sprint(model.TryConsume(n, now), nil)
			case 2, 3:
				p, err := h.TryConsumeAndReturnRemaining(e.ctx, n)
				got, want = fmt.Sprintf("%+v %v", p, err), fmt.Sprintf("%+v <nil>", model.TryConsumeAndReturnRemaining(n, now))
			case 4:
				p, err := h.EstimateAbilityToConsume(e.ctx, n)
				got, want = fmt.Sprintf("%+v %v", p, err), fmt.Sprintf("%+v <nil>", model.EstimateAbilityToConsume(n, now))
			case 5:
				c, err := h.TryConsumeAsMuchAsPossible(e.ctx, n)
				got, want = fmt.Sprint(c, err), fmt.Sprint(model.TryConsumeAsMuchAsPossible(n, now), nil)
			case 6:
				err := h.AddTokens(e.ctx, n)
				model.AddTokens(n, now)
				got, want = fmt.Sprint(err), "<nil>"
			case 7:
				w, err := h.ConsumeIgnoringRateLimits(e.ctx, n)
				got, want = fmt.Sprint(w, err), fmt.Sprint(time.Duration(model.ConsumeIgnoringRateLimits(n, now)), nil)
			case 8:
				a, err := h.AvailableTokens(e.ctx)
				got, want = fmt.Sprint(a, err), fmt.Sprint(model.AvailableTokens(now), nil)
			case 9:
				if rng.IntN(4) == 0 {
					err := h.ForceAddTokens(e.ctx, n)
					model.ForceAddTokens(n, now)
					got, want = fmt.Sprint(err), "<nil>"
				} else {
					err := h.Reset(e.ctx)
					model.Reset(now)
					got, want = fmt.Sprint(err), "<nil>"
				}
			}
			if got != want {
				e.Fatalf("%s, step %d (executor %d): got %s, the model says %s", mc.name, step, step%len(hs), got, want)
			}
		}
		// the stored state itself must equal the model's
		d, err := hs[0].Diagnose(e.ctx)
		if err != nil {
			e.Fatalf("%s: Diagnose: %v", mc.name, err)
		}
		model.Refill(e.clock.Now())
		for i := range model.State {
			if d.Available[i] != model.State[i].Size {
				e.Errorf("%s: bandwidth %d holds %d tokens, the model %d", mc.name, i, d.Available[i], model.State[i].Size)
			}
		}
	}
	// replacement through the executor equals the model's
	old, _ := core.NewConfig(core.Greedy(100, 10, time.Minute))
	repl, _ := core.NewConfig(core.Greedy(200, 10, time.Minute))
	for _, s := range []core.TokensInheritance{core.InheritProportionally, core.InheritAsIs, core.InheritReset, core.InheritAdditive} {
		h := e.handles(e.key("replace-"+s.String()), staticConfig(old.Bandwidths...))[0]
		now := e.clock.Now()
		model := core.NewBucket(old.Clone(), now)
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
