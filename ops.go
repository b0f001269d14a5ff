package bucketgrid

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/core/wire"
)

// runner is the one primitive the behaviour of a Bucket is written over:
// apply one operation atomically. Local runs it under its mutex with
// core.State.Apply, Handle sends it to the Manager's executor, which runs
// wire.Process. Everything else a Bucket does (argument checks, listener
// events, blocking and giving tokens back, the verbose probe) lives once, in
// the functions of this file, so local and distributed buckets behave alike
// by construction. Local keeps its own TryConsume and
// TryConsumeAndReturnRemaining, the hot path, equal to these by test.
type runner interface {
	// run applies op, valid but for its configuration, and returns its
	// result, the share that decided it (Verbose.Share) and, with verbose,
	// the diagnostics after it, taken in the same atomic step; the
	// Verbose's Probe is left zero.
	run(ctx context.Context, op wire.Op, verbose bool) (wire.Result, Verbose, error)
	// events returns the listener, never nil.
	events() Listener
	// sleeper returns the clock that blocking calls wait on.
	sleeper() clock.Clock
	// validConfig validates a replacement configuration for the clock of
	// the side that executes the bucket.
	validConfig(cfg *core.Config) error
}

// giveBackTimeout bounds the request that returns the tokens of an
// interrupted wait: the caller's context is over by then.
const giveBackTimeout = time.Second

// tokensError is the error for a non-positive token count n.
func tokensError(n int64) error { return fmt.Errorf("%w, got %d", ErrTokens, n) }

// report tells l about a consumption attempt of n tokens.
func report(l Listener, ok bool, n int64) {
	if ok {
		l.OnConsumed(n)
	} else {
		l.OnRejected(n)
	}
}

// probeOf is the Probe of an OpTryConsumeAndReturnRemaining result.
func probeOf(r wire.Result) core.Probe {
	return core.Probe{Consumed: r.OK, Remaining: r.Tokens, WaitForRefill: time.Duration(r.Wait),
		WaitForReset: time.Duration(r.Reset)}
}

// runTokens runs an operation of n tokens after checking n.
func runTokens(ctx context.Context, b runner, kind wire.OpKind, n int64, verbose bool) (wire.Result, Verbose, error) {
	if n <= 0 {
		return wire.Result{}, Verbose{}, tokensError(n)
	}
	return b.run(ctx, wire.Op{Kind: kind, Tokens: n}, verbose)
}

func tryConsume(ctx context.Context, b runner, n int64) (bool, error) {
	r, _, err := runTokens(ctx, b, wire.OpTryConsume, n, false)
	if err != nil {
		return false, err
	}
	report(b.events(), r.OK, n)
	return r.OK, nil
}

func tryConsumeAndReturnRemaining(ctx context.Context, b runner, n int64) (core.Probe, error) {
	r, _, err := runTokens(ctx, b, wire.OpTryConsumeAndReturnRemaining, n, false)
	if err != nil {
		return core.Probe{}, err
	}
	report(b.events(), r.OK, n)
	return probeOf(r), nil
}

func tryConsumeVerbose(ctx context.Context, b runner, n int64) (Verbose, error) {
	r, v, err := runTokens(ctx, b, wire.OpTryConsumeAndReturnRemaining, n, true)
	if err != nil {
		return Verbose{}, err
	}
	report(b.events(), r.OK, n)
	v.Probe = probeOf(r)
	return v, nil
}

func estimate(ctx context.Context, b runner, n int64) (core.Estimate, error) {
	r, _, err := runTokens(ctx, b, wire.OpEstimate, n, false)
	if err != nil {
		return core.Estimate{}, err
	}
	return core.Estimate{CanBeConsumed: r.OK, Remaining: r.Tokens, WaitForRefill: time.Duration(r.Wait)}, nil
}

func tryConsumeAsMuchAsPossible(ctx context.Context, b runner, limit int64) (int64, error) {
	r, _, err := runTokens(ctx, b, wire.OpTryConsumeAsMuchAsPossible, limit, false)
	if err != nil {
		return 0, err
	}
	if r.Tokens > 0 {
		b.events().OnConsumed(r.Tokens)
	}
	return r.Tokens, nil
}

func addTokens(ctx context.Context, b runner, kind wire.OpKind, n int64) error {
	_, _, err := runTokens(ctx, b, kind, n, false)
	return err
}

func consumeIgnoringRateLimits(ctx context.Context, b runner, n int64) (time.Duration, error) {
	r, _, err := runTokens(ctx, b, wire.OpConsumeIgnoringRateLimits, n, false)
	if err != nil {
		return 0, err
	}
	if !r.OK {
		return 0, fmt.Errorf("%w: %d tokens", ErrOverdraftTooLarge, n)
	}
	b.events().OnConsumed(n)
	return time.Duration(r.Wait), nil
}

func reset(ctx context.Context, b runner) error {
	_, _, err := b.run(ctx, wire.Op{Kind: wire.OpReset}, false)
	return err
}

func availableTokens(ctx context.Context, b runner) (int64, error) {
	r, _, err := b.run(ctx, wire.Op{Kind: wire.OpAvailableTokens}, false)
	return r.Tokens, err
}

func replaceConfiguration(ctx context.Context, b runner, cfg core.Config, strategy core.TokensInheritance) error {
	if err := b.validConfig(&cfg); err != nil {
		return err
	}
	if !strategy.Valid() {
		return fmt.Errorf("bucketgrid: %w: %v", core.ErrUnknownStrategy, strategy)
	}
	_, _, err := b.run(ctx, wire.Op{Kind: wire.OpReplaceConfiguration, Config: &cfg, Inheritance: strategy}, false)
	return err
}

func diagnose(ctx context.Context, b runner) (core.Diagnostics, error) {
	_, v, err := b.run(ctx, wire.Op{Kind: wire.OpGetConfiguration}, true)
	return v.Diagnostics, err
}

// consume is Consume: reserve in one atomic step, then wait out the
// reservation, giving the tokens back if ctx ends first. It never waits past
// ctx's deadline: tokens that would come later are refused at once
// (x/time/rate's WaitN), with an error wrapping context.DeadlineExceeded.
func consume(ctx context.Context, b runner, n int64) error {
	if n <= 0 {
		return tokensError(n)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	limit, bounded := int64(math.MaxInt64), false
	if deadline, ok := ctx.Deadline(); ok {
		limit, bounded = max(int64(time.Until(deadline)), 0), true
	}
	r, _, err := b.run(ctx, wire.Op{Kind: wire.OpReserve, Tokens: n, MaxWait: limit}, false)
	if err != nil {
		return err
	}
	l := b.events()
	if !r.OK {
		switch {
		case n > r.Tokens: // Tokens: the smallest capacity
			return fmt.Errorf("%w: %d tokens, capacity %d", ErrExceedsCapacity, n, r.Tokens)
		case bounded:
			l.OnRejected(n)
			return fmt.Errorf("bucketgrid: %d tokens would come later than the context's deadline, %v away: %w",
				n, time.Duration(limit), context.DeadlineExceeded)
		}
		return fmt.Errorf("%w: %d tokens would come after more than %v", ErrOverdraftTooLarge, n,
			time.Duration(math.MaxInt64))
	}
	if r.Wait > 0 {
		l.OnParked(time.Duration(r.Wait))
		if err := clock.Sleep(ctx, b.sleeper(), time.Duration(r.Wait)); err != nil {
			l.OnInterrupted(err)
			back, cancel := context.WithTimeout(context.WithoutCancel(ctx), giveBackTimeout)
			defer cancel()
			if _, _, aerr := b.run(back, wire.Op{Kind: wire.OpAddTokens, Tokens: n}, false); aerr != nil {
				return fmt.Errorf("%w (giving the %d reserved tokens back failed: %v)", err, n, aerr)
			}
			return err
		}
	}
	l.OnConsumed(n)
	return nil
}
