package bucketgrid

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/core"
)

// Local is a token bucket whose state lives in this process: a core.Bucket
// under a mutex. It implements Bucket; every method is safe for concurrent
// use, and TryConsume does not allocate.
//
// A Local only fails on invalid arguments: a non-positive token count (an
// error wrapping ErrTokens), an invalid replacement configuration (a
// *core.ConfigError), a blocking request for more tokens than a capacity
// (ErrExceedsCapacity), an overdraft beyond the int64 range
// (ErrOverdraftTooLarge), or the end of the context of a blocking call.
//
// Listener events are reported after the bucket's lock is released, on the
// caller's goroutine.
type Local struct {
	mu sync.Mutex
	b  core.Bucket // guarded by mu
	// env is nil for the defaults: the monotonic clock, read without an
	// interface call, and no listener. A LocalMap's buckets share theirs.
	env *localEnv
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

// LocalOption configures NewLocal.
type LocalOption func(*localOptions)

type localOptions struct {
	clock    clock.Clock
	listener Listener
}

// WithLocalClock makes the bucket tell time by c instead of
// clock.Monotonic(). Aligned refill styles need a clock whose Wall method
// reports true, such as clock.Wall(), clock.WallMillis() or a *clock.Fake;
// blocking calls wait with clock.Sleep on c, so a clock.Sleeper controls
// them. A nil c selects the default.
func WithLocalClock(c clock.Clock) LocalOption { return func(o *localOptions) { o.clock = c } }

// WithLocalListener makes the bucket report its events to l, synchronously,
// after the bucket's lock is released. A nil l reports nothing, the default.
func WithLocalListener(l Listener) LocalOption { return func(o *localOptions) { o.listener = l } }

// NewLocal returns a bucket of configuration cfg, full (or at each
// bandwidth's initial tokens) at the clock's current time. It validates cfg
// first, with cfg.ValidateForClock(c.Wall()) for the bucket's clock c, and
// returns the
// *core.ConfigError without building anything when cfg is invalid. The
// bucket keeps its own copy of cfg.
func NewLocal(cfg core.Config, opts ...LocalOption) (*Local, error) {
	var o localOptions
	for _, opt := range opts {
		opt(&o)
	}
	l := new(Local)
	if err := l.init(&cfg, newEnv(o.clock, o.listener)); err != nil {
		return nil, err
	}
	l.b = core.NewBucket(cfg.Clone(), l.now())
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

// clockOrDefault returns the clock for sleeping.
func (l *Local) clockOrDefault() clock.Clock {
	if l.env == nil || l.env.clock == nil {
		return clock.Monotonic()
	}
	return l.env.clock
}

// tokensError is the error for a non-positive token count n.
func tokensError(n int64) error { return fmt.Errorf("%w, got %d", ErrTokens, n) }

// TryConsume takes n tokens if every bandwidth has them now and reports
// whether it did. It never waits and never allocates. n must be positive.
func (l *Local) TryConsume(_ context.Context, n int64) (bool, error) {
	if n <= 0 {
		return false, tokensError(n)
	}
	now := l.now()
	l.mu.Lock()
	ok := l.b.TryConsume(n, now)
	l.mu.Unlock()
	if l.env.listen() != nil {
		l.report(ok, n)
	}
	return ok, nil
}

// report tells the listener about a consumption attempt.
func (l *Local) report(ok bool, n int64) {
	if ok {
		l.env.listener.OnConsumed(n)
	} else {
		l.env.listener.OnRejected(n)
	}
}

// TryConsumeAndReturnRemaining is TryConsume that also reports the tokens
// left and, when it refuses, how long until the request could succeed
// (math.MaxInt64 when n exceeds a capacity and never can) and until the
// bucket is full again.
func (l *Local) TryConsumeAndReturnRemaining(_ context.Context, n int64) (core.Probe, error) {
	if n <= 0 {
		return core.Probe{}, tokensError(n)
	}
	now := l.now()
	l.mu.Lock()
	p := l.b.TryConsumeAndReturnRemaining(n, now)
	l.mu.Unlock()
	if l.env.listen() != nil {
		l.report(p.Consumed, n)
	}
	return p, nil
}

// EstimateAbilityToConsume reports whether n tokens could be taken now and,
// if not, how long until they could; it takes nothing and
// reports no event.
func (l *Local) EstimateAbilityToConsume(_ context.Context, n int64) (core.Estimate, error) {
	if n <= 0 {
		return core.Estimate{}, tokensError(n)
	}
	now := l.now()
	l.mu.Lock()
	e := l.b.EstimateAbilityToConsume(n, now)
	l.mu.Unlock()
	return e, nil
}

// TryConsumeAsMuchAsPossible takes min(limit, available) tokens and returns
// how many it took: zero when the bucket is empty or in overdraft. Pass
// math.MaxInt64 for no limit; limit must be positive. A positive take is
// reported as consumed; nothing is reported for zero.
func (l *Local) TryConsumeAsMuchAsPossible(_ context.Context, limit int64) (int64, error) {
	if limit <= 0 {
		return 0, tokensError(limit)
	}
	now := l.now()
	l.mu.Lock()
	n := l.b.TryConsumeAsMuchAsPossible(limit, now)
	l.mu.Unlock()
	if n > 0 && l.env.listen() != nil {
		l.env.listener.OnConsumed(n)
	}
	return n, nil
}

// AddTokens adds n tokens to every bandwidth, each capped at its capacity:
// Bucket4j's way to give back tokens of a failed compensating transaction.
func (l *Local) AddTokens(_ context.Context, n int64) error {
	if n <= 0 {
		return tokensError(n)
	}
	now := l.now()
	l.mu.Lock()
	l.b.AddTokens(n, now)
	l.mu.Unlock()
	return nil
}

// ForceAddTokens adds n tokens to every bandwidth even beyond its capacity;
// a bandwidth above its capacity does not refill until consumption brings it
// below.
func (l *Local) ForceAddTokens(_ context.Context, n int64) error {
	if n <= 0 {
		return tokensError(n)
	}
	now := l.now()
	l.mu.Lock()
	l.b.ForceAddTokens(n, now)
	l.mu.Unlock()
	return nil
}

// ConsumeIgnoringRateLimits takes n tokens even if that overdraws the
// bucket, and returns how long until refill repays the debt (zero when there
// is none). Later consumptions are refused until it is repaid. When the wait
// would not fit in a time.Duration it takes nothing and returns
// ErrOverdraftTooLarge.
func (l *Local) ConsumeIgnoringRateLimits(_ context.Context, n int64) (time.Duration, error) {
	if n <= 0 {
		return 0, tokensError(n)
	}
	now := l.now()
	l.mu.Lock()
	d := l.b.ConsumeIgnoringRateLimits(n, now)
	l.mu.Unlock()
	if d == math.MaxInt64 {
		return 0, ErrOverdraftTooLarge
	}
	if l.env.listen() != nil {
		l.env.listener.OnConsumed(n)
	}
	return time.Duration(d), nil
}

// Reset fills every bandwidth to its capacity.
func (l *Local) Reset(_ context.Context) error {
	now := l.now()
	l.mu.Lock()
	l.b.Reset(now)
	l.mu.Unlock()
	return nil
}

// AvailableTokens returns the tokens available now: the minimum over the
// bandwidths, negative during an overdraft.
func (l *Local) AvailableTokens(_ context.Context) (int64, error) {
	now := l.now()
	l.mu.Lock()
	n := l.b.AvailableTokens(now)
	l.mu.Unlock()
	return n, nil
}

// ReplaceConfiguration switches the bucket to a copy of cfg now, carrying
// the available tokens over by strategy with bandwidths matched by id (see
// core.TokensInheritance). An invalid cfg (validated as by NewLocal) or an
// unknown strategy is rejected and the bucket is left as it was.
func (l *Local) ReplaceConfiguration(_ context.Context, cfg core.Config, strategy core.TokensInheritance) error {
	if err := cfg.ValidateForClock(l.wall()); err != nil {
		return err
	}
	if strategy > core.InheritAdditive {
		return fmt.Errorf("bucketgrid: %w: %v", core.ErrUnknownStrategy, strategy)
	}
	cfg = cfg.Clone()
	now := l.now()
	l.mu.Lock()
	l.b.ReplaceConfiguration(cfg, strategy, now)
	l.mu.Unlock()
	return nil
}

// Consume takes n tokens, waiting as long as refill takes: it reserves the
// tokens at once (the bucket may go into overdraft, so later callers queue
// behind) and then sleeps until they are due, on the clock's terms (a
// clock.Fake advances instead). It returns ErrExceedsCapacity without waiting
// when n exceeds a capacity, and ctx's error when ctx is done before the
// call or during the wait; see TryConsumeWithin for what an interrupted wait
// gives back.
//
// In the one case where even waiting cannot help, a wait beyond the int64
// range of nanoseconds (a bucket deep in overdraft on a very slow refill),
// Consume takes nothing and returns an error wrapping ErrOverdraftTooLarge.
func (l *Local) Consume(ctx context.Context, n int64) error {
	ok, err := l.consumeWithin(ctx, n, math.MaxInt64)
	if err == nil && !ok {
		return fmt.Errorf("%w: %d tokens would come after more than %v", ErrOverdraftTooLarge, n, time.Duration(math.MaxInt64))
	}
	return err
}

// TryConsumeWithin takes n tokens if they can be had within maxWait, waiting
// for them as Consume does, and reports whether it took them. It returns
// false without waiting when the wait would exceed maxWait (a rejection), and
// ErrExceedsCapacity when n exceeds a capacity. A negative maxWait is zero.
//
// If ctx is done while waiting, the reserved tokens are given back with
// AddTokens (capped at capacity, as any addition) and ctx's error is
// returned. Bucket4j differs here: its blocking bucket keeps the reservation
// of an interrupted thread, so the tokens are lost; giving them back matches
// the promise that a failed call has taken nothing.
//
// Events: rejected (over maxWait), parked(wait) before a wait, interrupted
// on ctx's end, consumed on success.
func (l *Local) TryConsumeWithin(ctx context.Context, n int64, maxWait time.Duration) (bool, error) {
	return l.consumeWithin(ctx, n, max(int64(maxWait), 0))
}

func (l *Local) consumeWithin(ctx context.Context, n, maxWait int64) (bool, error) {
	if n <= 0 {
		return false, tokensError(n)
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	now := l.now()
	l.mu.Lock()
	if n > l.minCapacity() {
		l.mu.Unlock()
		return false, fmt.Errorf("%w: %d tokens", ErrExceedsCapacity, n)
	}
	d := l.b.Reserve(n, maxWait, now)
	l.mu.Unlock()
	if d == math.MaxInt64 {
		if l.env.listen() != nil {
			l.env.listener.OnRejected(n)
		}
		return false, nil
	}
	if d > 0 {
		if l.env.listen() != nil {
			l.env.listener.OnParked(time.Duration(d))
		}
		if err := clock.Sleep(ctx, l.clockOrDefault(), time.Duration(d)); err != nil {
			now := l.now()
			l.mu.Lock()
			l.b.AddTokens(n, now)
			l.mu.Unlock()
			if l.env.listen() != nil {
				l.env.listener.OnInterrupted(err)
			}
			return false, err
		}
	}
	if l.env.listen() != nil {
		l.env.listener.OnConsumed(n)
	}
	return true, nil
}

// minCapacity returns the smallest capacity; l.mu must be held.
func (l *Local) minCapacity() int64 {
	bws := l.b.Config.Bandwidths
	c := bws[0].Capacity
	for i := 1; i < len(bws); i++ {
		c = min(c, bws[i].Capacity)
	}
	return c
}

// Diagnose returns a snapshot of the configuration and state refilled to
// now, the tokens of each bandwidth and the time until the bucket is full:
// the verbose API. The snapshot is a copy the caller may keep.
func (l *Local) Diagnose(_ context.Context) (core.Diagnostics, error) {
	now := l.now()
	l.mu.Lock()
	d := l.b.Diagnose(now)
	l.mu.Unlock()
	return d, nil
}

var _ Bucket = (*Local)(nil)
