package bucketgrid

import (
	"context"
	"sync"
	"time"

	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/core/wire"
)

// Local is a token bucket whose state lives in this process: a core.State
// under a mutex. It implements Bucket with the same behaviour as a Handle
// (see Bucket for each method); every method is safe for concurrent use,
// and TryConsume does not allocate. Listener events are reported after the
// bucket's lock is released, on the caller's goroutine.
//
// A Local fails only on invalid arguments (see Bucket), in its blocking
// calls, and never on I/O. Create one with NewLocal: the zero Local has no
// bandwidth and panics on use.
type Local struct {
	mu sync.Mutex
	b  core.State // guarded by mu
	// env is nil for the defaults: the monotonic clock, read without an
	// interface call, and no listener. A LocalGroup's buckets share theirs.
	env *localEnv
	// one holds the state of a single-bandwidth bucket of a LocalGroup.
	one [1]core.BandState
}

// localEnv is the clock and listener of one or more local buckets.
type localEnv struct {
	clock    clock.Clock // nil: the default monotonic clock
	listener Listener    // nil: none
}

// newEnv returns the environment of the given clock and listener, nil for
// the defaults.
func newEnv(c clock.Clock, listener Listener) *localEnv {
	c = normalizeClock(c)
	if c == nil && listener == nil {
		return nil
	}
	return &localEnv{c, listener}
}

// listen returns the listener, or nil when there is none.
func (e *localEnv) listen() Listener {
	if e == nil {
		return nil
	}
	return e.listener
}

// NewLocal returns a bucket of configuration cfg, full (or at each
// bandwidth's initial tokens) at the clock's current time. It takes the
// options WithClock and WithListener. It validates
// cfg first, with cfg.ValidateForClock(c.Wall()) for the bucket's clock c,
// and returns the *core.ConfigError without building anything when cfg is
// invalid. The bucket keeps its own copy of cfg.
func NewLocal(cfg core.Config, opts ...Option) (*Local, error) {
	o := collect(opts, Option.applyLocal)
	l := new(Local)
	if err := l.init(&cfg, newEnv(o.clock, o.listener)); err != nil {
		return nil, err
	}
	l.b = core.NewState(cfg.Clone(), l.now())
	return l, nil
}

// normalizeClock maps the default monotonic clock to nil, the fast path.
func normalizeClock(c clock.Clock) clock.Clock {
	if c == clock.Monotonic() {
		return nil
	}
	return c
}

// init validates cfg for env's clock and sets l's environment; the caller
// then sets l.b.
func (l *Local) init(cfg *core.Config, env *localEnv) error {
	l.env = env
	return cfg.ValidateForClock(l.wall())
}

// now reads the bucket's clock. The default is clock.Monotonic's reading,
// taken without an interface call (the compiler devirtualizes it).
func (l *Local) now() int64 {
	if l.env == nil || l.env.clock == nil {
		return clock.Monotonic().Now()
	}
	return l.env.clock.Now()
}

func (l *Local) wall() bool { return l.env != nil && l.env.clock != nil && l.env.clock.Wall() }

// run applies op under the lock; the runner of the shared behaviour.
func (l *Local) run(_ context.Context, op wire.Op, verbose bool) (wire.Result, Verbose, error) {
	var v Verbose
	now := l.now()
	l.mu.Lock()
	r, _ := wire.Apply(&l.b, &op, now)
	if verbose {
		v.Diagnostics = l.b.Diagnose(now)
	}
	l.mu.Unlock()
	return r, v, nil
}

func (l *Local) events() Listener {
	if ls := l.env.listen(); ls != nil {
		return ls
	}
	return nopListener{}
}

func (l *Local) sleeper() clock.Clock {
	if l.env == nil || l.env.clock == nil {
		return clock.Monotonic()
	}
	return l.env.clock
}

func (l *Local) validConfig(cfg *core.Config) error { return cfg.ValidateForClock(l.wall()) }

// TryConsume implements Bucket.TryConsume; it does not allocate. It is
// shorthand for TryConsumeAt(n, now) with the clock's current reading.
func (l *Local) TryConsume(_ context.Context, n int64) (bool, error) {
	return l.TryConsumeAt(n, l.now())
}

// TryConsumeAt is TryConsume at now, a reading of the bucket's clock (its
// Now: Unix nanoseconds for a wall clock, nanoseconds since an arbitrary
// origin for the default clock.Monotonic()) instead of the clock's current
// one: the explicit-time form, as x/time/rate's AllowN takes its t, for a
// caller that read the clock already and for tests that drive time
// without a fake clock. The bucket first refills up to now; a now no later
// than the bucket's last refill refills nothing and undoes nothing (time
// never runs back), so the consumption is judged on the tokens the bucket
// holds. Listener events are those of TryConsume. It never waits, does
// not allocate and fails only with ErrTokens for n <= 0.
func (l *Local) TryConsumeAt(n, now int64) (bool, error) {
	if n <= 0 {
		return false, tokensError(n)
	}
	l.mu.Lock()
	ok := l.b.TryConsume(n, now)
	l.mu.Unlock()
	if ls := l.env.listen(); ls != nil {
		report(ls, ok, n)
	}
	return ok, nil
}

// TryConsumeAndReturnRemaining implements Bucket.TryConsumeAndReturnRemaining;
// it does not allocate.
func (l *Local) TryConsumeAndReturnRemaining(_ context.Context, n int64) (core.Probe, error) {
	if n <= 0 {
		return core.Probe{}, tokensError(n)
	}
	now := l.now()
	l.mu.Lock()
	p := l.b.TryConsumeAndReturnRemaining(n, now)
	l.mu.Unlock()
	if ls := l.env.listen(); ls != nil {
		report(ls, p.Consumed, n)
	}
	return p, nil
}

// TryConsumeAndReturnRemainingVerbose implements
// Bucket.TryConsumeAndReturnRemainingVerbose, under one acquisition of the
// lock; its Share is always 0.
func (l *Local) TryConsumeAndReturnRemainingVerbose(ctx context.Context, n int64) (Verbose, error) {
	return tryConsumeVerbose(ctx, l, n)
}

// EstimateAbilityToConsume implements Bucket.EstimateAbilityToConsume.
func (l *Local) EstimateAbilityToConsume(ctx context.Context, n int64) (core.Estimate, error) {
	return estimate(ctx, l, n)
}

// TryConsumeAsMuchAsPossible implements Bucket.TryConsumeAsMuchAsPossible.
func (l *Local) TryConsumeAsMuchAsPossible(ctx context.Context, limit int64) (int64, error) {
	return tryConsumeAsMuchAsPossible(ctx, l, limit)
}

// AddTokens implements Bucket.AddTokens.
func (l *Local) AddTokens(ctx context.Context, n int64) error {
	return addTokens(ctx, l, wire.OpAddTokens, n)
}

// ForceAddTokens implements Bucket.ForceAddTokens.
func (l *Local) ForceAddTokens(ctx context.Context, n int64) error {
	return addTokens(ctx, l, wire.OpForceAddTokens, n)
}

// ConsumeIgnoringRateLimits implements Bucket.ConsumeIgnoringRateLimits.
func (l *Local) ConsumeIgnoringRateLimits(ctx context.Context, n int64) (time.Duration, error) {
	return consumeIgnoringRateLimits(ctx, l, n)
}

// Reset implements Bucket.Reset.
func (l *Local) Reset(ctx context.Context) error { return reset(ctx, l) }

// AvailableTokens implements Bucket.AvailableTokens.
func (l *Local) AvailableTokens(ctx context.Context) (int64, error) { return availableTokens(ctx, l) }

// ReplaceConfiguration implements Bucket.ReplaceConfiguration; aligned
// refill styles need a bucket with a wall clock.
func (l *Local) ReplaceConfiguration(ctx context.Context, cfg core.Config, strategy core.TokensInheritance) error {
	return replaceConfiguration(ctx, l, cfg, strategy)
}

// Consume implements Bucket.Consume, sleeping on the bucket's clock.
func (l *Local) Consume(ctx context.Context, n int64) error {
	return consume(ctx, l, n)
}

// Diagnose implements Bucket.Diagnose.
func (l *Local) Diagnose(ctx context.Context) (core.Diagnostics, error) { return diagnose(ctx, l) }

var _ Bucket = (*Local)(nil)
