package tck

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/core/wire"
	"github.com/bucketgrid/bucketgrid/retry"
)

// faultStore injects faults into the store under test. Its hook sees every
// operation, through the four methods or the store's extensions (see
// intercept), so an executor over it runs with its memory and pipeline
// when the store offers them.
//
// An injected conflict stands for another client's write landing between a
// read and the write that follows: every version handed out before it
// turns stale, whatever kind of version the store has. To that end
// faultStore hands out versions of its own, each naming the store's version
// and the key's epoch when it was read or written; a conflict bumps the
// epoch. (Rewriting the same bytes in the store would not do: a version
// that is a digest of the value would not change, and the executor would
// rightly win.) A write refused by an injected conflict reports, like a
// store that returns the winner of a lost race, the key's value with a
// version of the new epoch.
type faultStore struct {
	inner              cas.Store
	mu                 sync.Mutex
	conflicts          int  // stale reads to cause
	failGets, failPuts int  // failures to return
	block              bool // hang until the context ends
	held               map[cas.Version]heldVersion
	last               cas.Version // the last version handed out
	epoch              map[string]int
}

// heldVersion is what a version handed out by faultStore names.
type heldVersion struct {
	key   string
	ver   cas.Version
	epoch int
}

func newFaultStore(s cas.Store) *faultStore {
	return &faultStore{inner: s, held: map[cas.Version]heldVersion{}, epoch: map[string]int{}}
}

// store returns the store under test behind the faults, with its
// extensions.
func (f *faultStore) store() cas.Store { return intercept(f.inner, f.hook) }

func (f *faultStore) take(n *int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if *n > 0 {
		*n--
		return true
	}
	return false
}

func (f *faultStore) hang(ctx context.Context) error {
	f.mu.Lock()
	b := f.block
	f.mu.Unlock()
	if !b {
		return nil
	}
	<-ctx.Done()
	return ctx.Err()
}

// hold returns a version of faultStore's own for the store's version ver of
// key, in the key's current epoch.
func (f *faultStore) hold(key string, ver cas.Version) cas.Version {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.last++
	f.held[f.last] = heldVersion{key: key, ver: ver, epoch: f.epoch[key]}
	return f.last
}

// own turns the versions in op's outcome into versions of faultStore's own.
func (f *faultStore) own(op *cas.Op) {
	r := &op.Result
	switch {
	case r.Written && r.Ver != 0: // a write through an extension reports its version
		r.Ver = f.hold(op.Key, r.Ver)
	case r.Found:
		r.Ver = f.hold(op.Key, r.Ver)
	}
}

func (f *faultStore) hook(ctx context.Context, op *cas.Op, next func(context.Context, *cas.Op) error) error {
	if err := f.hang(ctx); err != nil {
		return err
	}
	fail := &f.failPuts
	if op.Kind == cas.OpGet {
		fail = &f.failGets
	}
	if f.take(fail) {
		return errInjected
	}
	if op.Kind != cas.OpReplace {
		if err := next(ctx, op); err != nil {
			return err
		}
		f.own(op)
		return nil
	}
	f.mu.Lock()
	if f.conflicts > 0 {
		f.conflicts--
		f.epoch[op.Key]++ // another client wrote in between: the caller's read is stale
	}
	h, known := f.held[op.Ver]
	stale := !known || h.key != op.Key || h.epoch != f.epoch[op.Key]
	f.mu.Unlock()
	if stale {
		op.Result = cas.Result{Current: true}
		data, ver, found, err := f.inner.Get(ctx, op.Key)
		if err != nil {
			return err
		}
		if found {
			op.Result.Found, op.Result.Data, op.Result.Ver = true, data, f.hold(op.Key, ver)
		}
		return nil
	}
	inner := *op
	inner.Ver = h.ver
	if err := next(ctx, &inner); err != nil {
		return err
	}
	op.Result = inner.Result
	f.own(op)
	return nil
}

func (f *faultStore) set(fn func(f *faultStore)) {
	f.mu.Lock()
	fn(f)
	f.mu.Unlock()
}

// fixture is a bucket of capacity 100 (100 tokens per minute) on a frozen
// fake clock, behind a fault-injecting store.
type fixture struct {
	e     *env
	fs    *faultStore
	exec  *cas.Executor
	b     *bucketgrid.Handle
	key   string
	slept []time.Duration
	meta  []retry.Metadata
}

// newFixture makes a fixture whose executor follows strategy, stopped after
// kitAttempts attempts whatever strategy says: a store whose writes always
// lose must not hold a check forever.
func newFixture(e *env, name string, strategy retry.Strategy) *fixture {
	x := &fixture{e: e, fs: newFaultStore(e.store)}
	x.exec = cas.New(x.fs.store(), cas.WithClock(sleepRecorder{e.clock, &x.slept}), cas.WithRetry(retry.Func(func(m retry.Metadata) retry.Decision {
		x.meta = append(x.meta, m)
		if m.Attempt >= kitAttempts {
			return retry.Decision{Action: retry.Stop}
		}
		return strategy.Next(m)
	})))
	x.key = e.key(name)
	x.b = bucketgrid.NewManager(x.exec).Bucket(x.key, staticConfig(core.Greedy(100, 100, time.Minute)))
	if ok, err := x.b.TryConsume(e.ctx, 1); err != nil || !ok {
		e.Fatalf("creating the bucket: ok=%v err=%v", ok, err)
	}
	return x
}

func (x *fixture) available() int64 {
	n, err := bucketgrid.NewManager(cas.New(x.e.store, cas.WithClock(x.e.now()), cas.WithRetry(kitRetry()))).
		Bucket(x.key, staticConfig(core.Greedy(1, 1, time.Minute))).AvailableTokens(x.e.ctx)
	if err != nil {
		x.e.Fatalf("reading the bucket back: %v", err)
	}
	return n
}

func (x *fixture) reset() { x.slept, x.meta = nil, nil }

// sleepRecorder is the fixture's executor clock: the kit's fake clock, whose
// Sleep also records each wait between retries. The executor calls it on one
// goroutine at a time.
type sleepRecorder struct {
	*clock.Fake
	slept *[]time.Duration
}

func (c sleepRecorder) Sleep(ctx context.Context, d time.Duration) error {
	*c.slept = append(*c.slept, d)
	return c.Fake.Sleep(ctx, d)
}

func checkInjectedConflicts(e *env) {
	x := newFixture(e, "conflicts", retry.Immediate(4))

	// three stale reads, four attempts allowed: charged exactly once
	x.fs.set(func(f *faultStore) { f.conflicts = 3 })
	before := x.exec.Stats()
	if ok, err := x.b.TryConsume(e.ctx, 5); err != nil || !ok {
		e.Fatalf("TryConsume after 3 injected conflicts with 4 attempts allowed: ok=%v err=%v", ok, err)
	}
	if d := x.exec.Stats().Conflicts - before.Conflicts; d != 3 {
		e.Errorf("executor counted %d conflicts, want the 3 injected", d)
	}
	if got := x.available(); got != 94 {
		e.Errorf("after 3 lost races and one success, %d tokens left, want 94: a retried request was charged more than once", got)
	}

	// four stale reads, four attempts: gives up, charges nothing
	x.fs.set(func(f *faultStore) { f.conflicts = 4 })
	_, err := x.b.TryConsume(e.ctx, 5)
	if !errors.Is(err, cas.ErrConflict) {
		e.Errorf("after as many conflicts as allowed attempts: err = %v, want cas.ErrConflict", err)
	}
	if got := x.available(); got != 94 {
		e.Errorf("a request that gave up changed the bucket: %d tokens, want 94", got)
	}
}

func checkStrategyHonoured(e *env) {
	// a fixed delay: the executor must sleep exactly what the strategy said
	x := newFixture(e, "delays", retry.Func(func(m retry.Metadata) retry.Decision {
		return retry.Decision{Action: retry.RetryAfter, Delay: 7 * time.Millisecond}
	}))
	x.reset()
	x.fs.set(func(f *faultStore) { f.conflicts = 2 })
	if ok, err := x.b.TryConsume(e.ctx, 1); err != nil || !ok {
		e.Fatalf("TryConsume with 2 injected conflicts: ok=%v err=%v", ok, err)
	}
	if len(x.meta) != 2 || x.meta[0].Attempt != 1 || x.meta[1].Attempt != 2 {
		e.Errorf("strategy consulted with %+v, want attempts 1 and 2", x.meta)
	}
	for _, m := range x.meta {
		if m.Key != x.key {
			e.Errorf("strategy metadata key %q, want %q", m.Key, x.key)
		}
	}
	if len(x.meta) == 2 && x.meta[1].Now-x.meta[1].Start != int64(7*time.Millisecond) {
		e.Errorf("metadata Now-Start = %v at attempt 2, want 7ms", time.Duration(x.meta[1].Now-x.meta[1].Start))
	}
	if len(x.slept) != 2 || x.slept[0] != 7*time.Millisecond || x.slept[1] != 7*time.Millisecond {
		e.Errorf("executor slept %v, want [7ms 7ms]", x.slept)
	}

	// a budget: endless conflicts end after the budget, not before or long after
	budget := 50 * time.Millisecond
	y := newFixture(e, "budget", retry.Backoff(retry.BackoffConfig{Base: 4 * time.Millisecond, Cap: 8 * time.Millisecond,
		Budget: budget, MinAttempts: 1, Rand: func(n int64) int64 { return n - 1 }}))
	y.reset()
	y.fs.set(func(f *faultStore) { f.conflicts = 1 << 30 })
	t0 := e.clock.Now()
	_, err := y.b.TryConsume(e.ctx, 1)
	y.fs.set(func(f *faultStore) { f.conflicts = 0 })
	if !errors.Is(err, cas.ErrConflict) {
		e.Errorf("endless conflicts under a %v budget: err = %v, want cas.ErrConflict", budget, err)
	}
	if spent := time.Duration(e.clock.Now() - t0); spent > budget {
		e.Errorf("retried for %v of clock time, beyond the %v budget", spent, budget)
	}
	if len(y.slept) < 3 {
		e.Errorf("gave up after %d delays (%v); the budget allows more", len(y.slept), y.slept)
	}
	if got := y.available(); got != 99 {
		e.Errorf("a request that gave up changed the bucket: %d tokens, want 99", got)
	}
}

func checkInjectedErrors(e *env) {
	x := newFixture(e, "errors", retry.Immediate(10))
	for _, tc := range []struct {
		name string
		set  func(f *faultStore)
		call func() error
	}{
		// An estimate writes nothing, so even an executor that remembers
		// the bucket (see cas.WithMemory) must read it.
		{"read", func(f *faultStore) { f.failGets = 1 }, func() error {
			_, err := x.b.EstimateAbilityToConsume(e.ctx, 1)
			return err
		}},
		{"write", func(f *faultStore) { f.failPuts = 1 }, func() error {
			_, err := x.b.TryConsume(e.ctx, 1)
			return err
		}},
	} {
		x.fs.set(tc.set)
		before := x.exec.Stats()
		err := tc.call()
		if !errors.Is(err, cas.ErrStore) || !errors.Is(err, errInjected) {
			e.Errorf("injected %s failure: err = %v, want an error wrapping cas.ErrStore and the store's error", tc.name, err)
		}
		if d := x.exec.Stats().Attempts - before.Attempts; d != 1 {
			e.Errorf("injected %s failure was retried (%d attempts): a store failure is not a lost race", tc.name, d)
		}
		if got := x.available(); got != 99 {
			e.Errorf("after an injected %s failure the bucket holds %d tokens, want 99 (state intact)", tc.name, got)
		}
	}
	// a hung store: the request's deadline bounds the call
	x.fs.set(func(f *faultStore) { f.block = true })
	ctx, cancel := context.WithTimeout(e.ctx, 100*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	_, err := x.b.TryConsume(ctx, 1)
	x.fs.set(func(f *faultStore) { f.block = false })
	if !errors.Is(err, context.DeadlineExceeded) {
		e.Errorf("hung store: err = %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(t0); d > 30*time.Second {
		e.Errorf("hung store: the call returned after %v, want about the 100ms deadline", d)
	}
	if got := x.available(); got != 99 {
		e.Errorf("after a timeout the bucket holds %d tokens, want 99", got)
	}
}

func checkDeadlineWins(e *env) {
	checkStrategyHonoured(e)
	x := newFixture(e, "deadline", retry.Func(func(retry.Metadata) retry.Decision {
		return retry.Decision{Action: retry.RetryAfter, Delay: time.Hour}
	}))
	x.fs.set(func(f *faultStore) { f.conflicts = 1 << 30 })
	ctx, cancel := context.WithTimeout(e.ctx, 100*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	_, err := x.b.TryConsume(ctx, 1)
	x.fs.set(func(f *faultStore) { f.conflicts = 0 })
	if !errors.Is(err, context.DeadlineExceeded) {
		e.Errorf("a strategy asking for a 1h delay under a 100ms deadline: err = %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(t0); d > 30*time.Second {
		e.Errorf("the call took %v: the context deadline must win over the strategy's delay", d)
	}
	if len(x.slept) != 0 {
		e.Errorf("the executor slept %v past the deadline instead of failing", x.slept)
	}
}

// checkClockSkew runs two clients of one store, one Δ ahead of true time and
// one Δ behind. The documented bound: over a span S, consumption never
// exceeds capacity + rate×(S + 2Δ), and a client behind never mints tokens
// for time another client already accounted for.
func checkClockSkew(e *env) {
	const delta = 50 * time.Millisecond
	ahead := clock.Func(func() int64 { return e.clock.Now() + int64(delta) }, true)
	behind := clock.Func(func() int64 { return e.clock.Now() - int64(delta) }, true)
	key := e.key("skew")
	cfg := staticConfig(core.Greedy(100, 1000, time.Second)) // 1 token/ms
	a := bucketgrid.NewManager(cas.New(e.store, cas.WithClock(ahead), cas.WithRetry(kitRetry()))).Bucket(key, cfg)
	b := bucketgrid.NewManager(cas.New(e.store, cas.WithClock(behind), cas.WithRetry(kitRetry()))).Bucket(key, cfg)
	drain := func(h *bucketgrid.Handle) int64 {
		n, err := h.TryConsumeAsMuchAsPossible(e.ctx, 1<<40)
		if err != nil {
			e.Fatalf("drain: %v", err)
		}
		return n
	}
	total := drain(b) // created by the client behind, at -Δ
	// the client ahead drains at true time 0, stamping +Δ
	total += drain(a)
	// the client behind, up to true time 2Δ-1ms, must find nothing new
	for i := 0; i < int(2*delta/time.Millisecond)-1; i++ {
		e.clock.Advance(time.Millisecond)
		if n := drain(b); n != 0 {
			e.Fatalf("the client %v behind minted %d tokens for time the client ahead had already accounted for", delta, n)
		}
	}
	span := 250 * time.Millisecond
	for el := 2*delta - time.Millisecond; el < span; el += time.Millisecond {
		e.clock.Advance(time.Millisecond)
		if int(el/time.Millisecond)%2 == 0 {
			total += drain(a)
		} else {
			total += drain(b)
		}
	}
	// elapsed since creation on the behind clock: span, plus 2Δ of skew
	bound := int64(100 + (span+2*delta)/time.Millisecond)
	if total > bound {
		e.Errorf("with ±%v of clock skew, %d tokens were consumed over %v; the bound is capacity + rate×(span+2Δ) = %d", delta, total, span, bound)
	}
	if floor := int64(100 + span/time.Millisecond - 1); total < floor {
		e.Errorf("with ±%v of clock skew only %d tokens were consumed over %v, want at least %d: skew must not starve clients", delta, total, span, floor)
	}
}

func staticConfig(bws ...core.Bandwidth) func(context.Context) (core.Config, error) {
	cfg, err := core.NewConfig(bws...)
	return func(context.Context) (core.Config, error) { return cfg, err }
}

// ttlSpy records the TTL of every write, through any path.
type ttlSpy struct {
	mu   sync.Mutex
	ttls []time.Duration
}

func (s *ttlSpy) hook(ctx context.Context, op *cas.Op, next func(context.Context, *cas.Op) error) error {
	if op.Kind != cas.OpGet {
		s.mu.Lock()
		s.ttls = append(s.ttls, op.TTL)
		s.mu.Unlock()
	}
	return next(ctx, op)
}

// checkTTLFollowsStrategy writes through each expiration strategy and
// compares the TTL handed to the store with the one the strategy defines.
func checkTTLFollowsStrategy(e *env) {
	for _, tc := range []struct {
		name   string
		expiry wire.Expiry
		want   []time.Duration // per write: create (1 token used), then 4 more
	}{
		{"never", wire.Expiry{}, []time.Duration{0, 0}},
		{"fixed", wire.Expiry{Kind: wire.ExpireFixed, Fixed: int64(90 * time.Second)}, []time.Duration{90 * time.Second, 90 * time.Second}},
		// 10 tokens per second: 1 used → full in 100ms; 5 used → 500ms; plus 2s
		{"after refill", bucketgrid.ExpireAfterRefill(2 * time.Second), []time.Duration{2100 * time.Millisecond, 2500 * time.Millisecond}},
	} {
		spy := &ttlSpy{}
		m := bucketgrid.NewManager(cas.New(intercept(e.store, spy.hook), cas.WithClock(e.now()), cas.WithRetry(kitRetry())), bucketgrid.WithExpiration(tc.expiry))
		h := m.Bucket(e.key("ttl-strategy-"+tc.name), staticConfig(core.Greedy(10, 10, time.Second)))
		if _, err := h.TryConsume(e.ctx, 1); err != nil {
			e.Fatalf("%s: %v", tc.name, err)
		}
		if _, err := h.TryConsume(e.ctx, 4); err != nil {
			e.Fatalf("%s: %v", tc.name, err)
		}
		if len(spy.ttls) != 2 || spy.ttls[0] != tc.want[0] || spy.ttls[1] != tc.want[1] {
			e.Errorf("expiration %s: TTLs written %v, want %v", tc.name, spy.ttls, tc.want)
		}
	}
}
