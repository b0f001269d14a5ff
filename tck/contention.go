package tck

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/core"
)

// checkSingleInit has racers create one key at once through every executor:
// exactly one initialisation may win, so every grant is accounted for.
func checkSingleInit(e *env) {
	const racers, capacity = 16, 100
	var calls atomic.Int64
	base := staticConfig(core.Greedy(capacity, 1, time.Hour))
	cfg := func(ctx context.Context) (core.Config, error) { calls.Add(1); return base(ctx) }
	key := e.key("init")
	var granted atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < racers; i++ {
		h := bucketgrid.NewManager(e.execs[i%len(e.execs)]).Bucket(key, cfg)
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, err := h.TryConsume(e.ctx, 1)
			if err != nil {
				e.Errorf("racer: %v", err)
			}
			if ok {
				granted.Add(1)
			}
		}()
	}
	wg.Wait()
	left, err := bucketgrid.NewManager(e.execs[0]).Bucket(key, cfg).AvailableTokens(e.ctx)
	if err != nil {
		e.Fatalf("AvailableTokens: %v", err)
	}
	if g := granted.Load(); left+g != capacity {
		e.Errorf("%d racers created one bucket of %d tokens: %d granted, %d left — the bucket was initialised more than once (create-if-absent is not atomic)", racers, capacity, g, left)
	}
	if calls.Load() < 1 {
		e.Errorf("the configuration function never ran")
	}
}

// checkContention runs goroutines×perGoroutine TryConsume(1) on one key,
// spread over every executor, twice: with room for all (every grant exact)
// and oversubscribed (exactly capacity granted). A run stops early once its
// failures are systematic: a request that gave up after kitAttempts lost
// races, or more than a tenth of the calls failed.
func checkContention(e *env) {
	g, per := e.cfg.goroutines, e.cfg.perGoroutine
	total := int64(g * per)
	for _, tc := range []struct {
		name     string
		capacity int64
	}{
		{"room for all", total + total/8},
		{"oversubscribed", total / 4},
	} {
		key := e.key("contention-" + tc.name)
		cfg := staticConfig(core.Greedy(tc.capacity, 1, time.Hour))
		var granted, failed, gaveUp atomic.Int64
		var firstErr atomic.Value
		var stop atomic.Bool
		var wg sync.WaitGroup
		for i := 0; i < g; i++ {
			h := bucketgrid.NewManager(e.execs[i%len(e.execs)]).Bucket(key, cfg)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := 0; j < per && !stop.Load(); j++ {
					ok, err := h.TryConsume(e.ctx, 1)
					switch {
					case err != nil:
						firstErr.CompareAndSwap(nil, err)
						if errors.Is(err, cas.ErrConflict) {
							gaveUp.Add(1)
							stop.Store(true)
						}
						if failed.Add(1) > total/10 || e.ctx.Err() != nil {
							stop.Store(true)
						}
					case ok:
						granted.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		left, err := bucketgrid.NewManager(e.execs[0]).Bucket(key, cfg).AvailableTokens(e.ctx)
		if err != nil {
			e.Fatalf("%s: AvailableTokens: %v", tc.name, err)
		}
		gr, f := granted.Load(), failed.Load()
		// a call that failed with a store error may have been applied (its
		// reply was lost): the SPI allows that, and the caller knows
		maybeApplied := f - gaveUp.Load()
		if sum := gr + left; sum > tc.capacity {
			e.Errorf("%s: %d×%d TryConsume(1) on capacity %d: %d granted + %d left = %d, so %d tokens were granted twice: an update was lost (a write that did not compare, or was dropped)",
				tc.name, g, per, tc.capacity, gr, left, sum, sum-tc.capacity)
		} else if short := tc.capacity - sum; short > maybeApplied {
			e.Errorf("%s: %d×%d TryConsume(1) on capacity %d: %d granted + %d left = %d, so %d tokens were charged but never granted, beyond the %d failed calls whose writes may have landed: requests were applied twice. A write that was applied but answered ok=false (a lost race) makes the executor apply the request again — a resent write must recognise itself, and a write whose outcome is unknown must return an error",
				tc.name, g, per, tc.capacity, gr, left, sum, short, maybeApplied)
		} else if short > 0 {
			e.Logf("%s: %d tokens charged by failed calls whose writes landed (allowed: their outcome was reported unknown)", tc.name, short)
		}
		switch {
		case gaveUp.Load() > 0:
			e.Errorf("%s: a request gave up after %d lost races in a row (%v): with %d executors sharing the key that does not happen by chance — writes keep losing: an Insert or a Replace that reports ok=false when it should write, or a version that changes between Get and Replace without a write",
				tc.name, kitAttempts, firstErr.Load(), len(e.execs))
		case f > total/10:
			e.Errorf("%s: %d of %d calls failed before the run stopped (first: %v): errors under load — a connection pool too small, timeouts too short, or a store that fails concurrent writes",
				tc.name, f, total, firstErr.Load())
		}
		if tc.capacity < total && f == 0 && gr != tc.capacity {
			e.Errorf("%s: granted %d, want exactly the capacity %d", tc.name, gr, tc.capacity)
		}
	}
}

// checkRateBounds consumes greedily in 13 ms steps of fake time over 2 s
// (steps that do not divide the refill, so rounding carries from call to
// call): consumption must equal capacity + the permitted refill, within one
// token.
func checkRateBounds(e *env) {
	for _, tc := range []struct {
		name string
		bw   core.Bandwidth
	}{
		{"greedy", core.Greedy(50, 100, time.Second)},
		{"intervally", core.Intervally(50, 30, 300*time.Millisecond)},
	} {
		hs := e.handles(e.key("rate-"+tc.name), staticConfig(tc.bw))
		const step = 13 * time.Millisecond
		span := 2 * time.Second / step * step
		var consumed int64
		for el, i := time.Duration(0), 0; el <= span; el, i = el+step, i+1 {
			n, err := hs[i%len(hs)].TryConsumeAsMuchAsPossible(e.ctx, 1<<40)
			if err != nil {
				e.Fatalf("%s: %v", tc.name, err)
			}
			consumed += n
			e.clock.Advance(step)
		}
		permitted := int64(span) / int64(tc.bw.RefillPeriod) * tc.bw.RefillTokens
		if tc.bw.Style == core.RefillGreedy {
			permitted = int64(span) * tc.bw.RefillTokens / int64(tc.bw.RefillPeriod)
		}
		hi, lo := tc.bw.Capacity+permitted, tc.bw.Capacity+permitted-1
		if consumed > hi {
			e.Errorf("%s: consumed %d over %v, above the bound capacity+permitted = %d", tc.name, consumed, span, hi)
		}
		if consumed < lo {
			e.Errorf("%s: consumed only %d over %v, below capacity+permitted-ε = %d: tokens were lost", tc.name, consumed, span, lo)
		}
	}
}

// linearizability: a frozen clock makes a bucket a counter with conditional
// decrement, which porcupine checks against recorded concurrent histories.
type linInput struct {
	kind byte // 'c' consume, 'a' add, 'r' read
	n    int64
}

type linOutput struct {
	ok bool
	n  int64
}

func bucketModel(capacity int64) porcupine.Model {
	return porcupine.Model{
		Init: func() any { return capacity },
		Step: func(state, input, output any) (bool, any) {
			s, in, out := state.(int64), input.(linInput), output.(linOutput)
			switch in.kind {
			case 'c':
				if s >= in.n {
					return out.ok, s - in.n
				}
				return !out.ok, s
			case 'a':
				return true, min(s+in.n, capacity)
			default:
				return out.n == s, s
			}
		},
		DescribeOperation: func(input, output any) string {
			in, out := input.(linInput), output.(linOutput)
			return fmt.Sprintf("%c(%d) -> %v/%d", in.kind, in.n, out.ok, out.n)
		},
	}
}

func checkLinearizable(e *env) {
	const clients, ops, capacity = 4, 40, 60
	key := e.key("linearizable")
	cfg := staticConfig(core.Greedy(capacity, 1, 24*time.Hour))
	var clockTick, gaveUp atomic.Int64
	var mu sync.Mutex
	var history []porcupine.Operation
	var wg sync.WaitGroup
	for c := 0; c < clients; c++ {
		h := bucketgrid.NewManager(e.execs[c%len(e.execs)]).Bucket(key, cfg)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < ops; i++ {
				in := linInput{kind: "ccca r"[(c+i)%6], n: int64(1 + (c*7+i)%3)}
				if in.kind == ' ' {
					in.kind = 'c'
				}
				call := clockTick.Add(1)
				var out linOutput
				var err error
				switch in.kind {
				case 'c':
					out.ok, err = h.TryConsume(e.ctx, in.n)
				case 'a':
					err = h.AddTokens(e.ctx, in.n)
				case 'r':
					out.n, err = h.AvailableTokens(e.ctx)
				}
				ret := clockTick.Add(1)
				if err != nil {
					if errors.Is(err, cas.ErrConflict) {
						if gaveUp.Add(1) > 3 {
							e.Errorf("client %d: requests keep giving up after %d lost races in a row (%v): writes keep losing — an Insert or a Replace that reports ok=false when it should write", c, kitAttempts, err)
							return
						}
						continue // gave up: nothing applied, nothing to check
					}
					e.Errorf("client %d: %v", c, err)
					return
				}
				mu.Lock()
				history = append(history, porcupine.Operation{ClientId: c, Input: in, Call: call, Output: out, Return: ret})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	res := porcupine.CheckOperationsTimeout(bucketModel(capacity), history, 20*time.Second)
	switch res {
	case porcupine.Illegal:
		e.Errorf("the recorded history of %d concurrent operations on one bucket is not linearizable: some operation saw or made a state no sequential order explains (a lost or duplicated update)", len(history))
	case porcupine.Unknown:
		e.Errorf("the linearizability check timed out on %d operations", len(history))
	}
}

// checkSingleInsert releases racers at once on each of many fresh keys, each
// racer inserting the key through the store SPI: exactly one Insert per key
// may report ok. An Insert that checks and then writes wins twice only when
// another falls in its window; one round of racers gives it few chances, so
// the check runs up to rounds × racers inserts (a store that let one
// overlapping Insert in 50 through twice passed SingleInitialisation's one
// round of 16 most of the time), within insertBudget of real time so that a
// slow store (FerretDB on SQLite takes tens of milliseconds an insert) is
// judged on fewer rounds rather than not at all. A round in which an Insert
// failed with an error is not judged (the SPI allows an outage); at least
// minRounds rounds must be.
func checkSingleInsert(e *env) {
	const rounds, minRounds, racers = 200, 10, 8
	const insertBudget = 15 * time.Second
	start := time.Now()
	twice, judged, erred := 0, 0, 0
	var firstErr error
	for round := 0; round < rounds && (round < minRounds || time.Since(start) < insertBudget); round++ {
		key := e.key(fmt.Sprintf("insert-%d", round))
		release := make(chan struct{})
		var won atomic.Int64
		var mu sync.Mutex
		var roundErr error
		var wg sync.WaitGroup
		for i := range racers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-release
				ok, err := e.store.Insert(e.ctx, key, []byte{'i', byte(i), 0}, 0)
				switch {
				case err != nil:
					mu.Lock()
					roundErr = err
					mu.Unlock()
				case ok:
					won.Add(1)
				}
			}()
		}
		close(release)
		wg.Wait()
		if e.ctx.Err() != nil {
			break
		}
		w := won.Load()
		switch {
		case roundErr != nil:
			erred++
			if firstErr == nil {
				firstErr = roundErr
			}
			if w > 1 {
				twice++ // two wins are two wins, whatever else failed
			}
			continue
		case w == 0:
			e.Errorf("%d overlapping Inserts of an absent key all reported a lost race, none an error: one must win", racers)
			return
		case w > 1:
			twice++
		}
		judged++
	}
	e.Logf("overlapping Inserts: %d rounds of %d judged, %d with an error (first: %v), in %v", judged, racers, erred, firstErr, time.Since(start).Round(time.Millisecond))
	if twice > 0 {
		e.Errorf("in %d of %d rounds, %d overlapping Inserts of one absent key, more than one reported ok: Insert is not an atomic create-if-absent, so two instances each create the bucket full and both capacities are granted. Create the key only if absent in one indivisible step of the store (SET NX, insertOne on a unique _id, Couchbase Insert)", twice, judged+erred, racers)
	}
	if judged < minRounds && twice == 0 {
		e.Errorf("only %d rounds of %d overlapping Inserts could be judged (at least %d needed): %d had an Insert fail with an error, the first: %v", judged, racers, minRounds, erred, firstErr)
	}
}
