package bucketgrid

import (
	"context"
	"errors"
	"time"

	"github.com/bucketgrid/bucketgrid/core"
)

// Bucket is a token bucket, local (Local) or distributed (Handle). Every
// method takes a context (a distributed call may block on I/O) and returns an
// error last. The two implementations share one implementation of
// everything above the storage, so they answer alike; tck.Run checks it.
//
// Token counts must be positive: a non-positive n is an error wrapping
// ErrTokens, returned before anything is read or written. A Local fails only
// on invalid arguments and in the blocking calls; a Handle also returns the
// errors of its executor. Listener events are documented on Listener.
type Bucket interface {
	// TryConsume takes n tokens if every bandwidth has them now and reports
	// whether it did. It never waits.
	TryConsume(ctx context.Context, n int64) (bool, error)
	// TryConsumeAndReturnRemaining is TryConsume that also reports the
	// tokens left and, when it refuses, how long until the request could
	// succeed (math.MaxInt64 when n exceeds a capacity and never can) and
	// until the bucket is full again; see core.Probe.
	TryConsumeAndReturnRemaining(ctx context.Context, n int64) (core.Probe, error)
	// TryConsumeAndReturnRemainingVerbose is TryConsumeAndReturnRemaining
	// that also returns the bucket's diagnostics right after the
	// consumption, taken in the same atomic step (one lock, or one round
	// trip), and how it was decided (see Verbose): Bucket4j's verbose API,
	// what headers describing every bandwidth need.
	TryConsumeAndReturnRemainingVerbose(ctx context.Context, n int64) (Verbose, error)
	// EstimateAbilityToConsume reports whether n tokens could be taken now
	// and, if not, how long until they could; it takes nothing.
	EstimateAbilityToConsume(ctx context.Context, n int64) (core.Estimate, error)
	// TryConsumeAsMuchAsPossible takes min(limit, available) tokens and
	// returns how many it took: zero when the bucket is empty or in
	// overdraft. Pass math.MaxInt64 for no limit.
	TryConsumeAsMuchAsPossible(ctx context.Context, limit int64) (int64, error)
	// AddTokens adds n tokens to every bandwidth, each capped at its
	// capacity: Bucket4j's way to give back the tokens of a failed
	// compensating transaction.
	AddTokens(ctx context.Context, n int64) error
	// ForceAddTokens adds n tokens to every bandwidth even beyond its
	// capacity; a bandwidth above its capacity does not refill until
	// consumption brings it below.
	ForceAddTokens(ctx context.Context, n int64) error
	// ConsumeIgnoringRateLimits takes n tokens even if that overdraws the
	// bucket, and returns how long until refill repays the debt (zero when
	// there is none); later consumptions are refused until it is repaid.
	// When the wait would not fit in a time.Duration it takes nothing and
	// returns ErrOverdraftTooLarge.
	ConsumeIgnoringRateLimits(ctx context.Context, n int64) (time.Duration, error)
	// Reset fills every bandwidth to its capacity.
	Reset(ctx context.Context) error
	// AvailableTokens returns the tokens available now: the minimum over the
	// bandwidths, negative during an overdraft.
	AvailableTokens(ctx context.Context) (int64, error)
	// ReplaceConfiguration switches the bucket to a copy of cfg now,
	// carrying the available tokens over by strategy with bandwidths matched
	// by id (see core.TokensInheritance). An invalid cfg (a
	// *core.ConfigError; aligned refill styles need a wall clock) or an
	// invalid strategy (core.ErrUnknownStrategy) is rejected before anything
	// is written.
	ReplaceConfiguration(ctx context.Context, cfg core.Config, strategy core.TokensInheritance) error
	// Consume takes n tokens, waiting as long as refill takes, and never
	// past ctx's deadline: Bucket4j's tryConsume(n, maxWait) is Consume
	// under context.WithTimeout(ctx, maxWait), refusing with an error
	// wrapping context.DeadlineExceeded where Bucket4j answers false. It reserves
	// the tokens at once (the bucket may go into overdraft, so later callers
	// queue behind) and then sleeps until they are due, on the clock's terms
	// (a clock.Fake advances instead). It returns without waiting:
	//   - an error wrapping ErrExceedsCapacity when n exceeds a capacity, as
	//     x/time/rate's WaitN does when n exceeds the burst;
	//   - an error wrapping ErrOverdraftTooLarge when the wait would not fit
	//     in a time.Duration (a bucket deep in overdraft on a slow refill);
	//   - an error wrapping context.DeadlineExceeded when the wait would end
	//     after ctx's deadline (the time left, time.Until(deadline), against
	//     the wait on the bucket's clock), as x/time/rate's WaitN refuses:
	//     nothing is taken and the listener hears a rejection;
	//   - ctx's error when ctx is already done.
	// If ctx ends during the wait anyway (canceled, or a sleep overran), the reserved tokens are given back with
	// AddTokens (capped at capacity, as any addition) and ctx's error is
	// returned. Bucket4j differs here: its blocking bucket keeps the
	// reservation of an interrupted thread; giving it back keeps the promise
	// that a failed call has taken nothing.
	Consume(ctx context.Context, n int64) error
	// Diagnose returns the configuration and state refilled to now, the
	// tokens of each bandwidth and the time until the bucket is full: the
	// verbose API. The snapshot is a copy the caller may keep.
	Diagnose(ctx context.Context) (core.Diagnostics, error)
}

// Verbose is the answer of TryConsumeAndReturnRemainingVerbose: what a
// check decided, the bucket it was decided on, and by whom. Small enough to
// return by value.
type Verbose struct {
	// Probe is TryConsumeAndReturnRemaining's answer.
	Probe core.Probe
	// Diagnostics describes the bucket right after the consumption, taken
	// in the same atomic step.
	Diagnostics core.Diagnostics
	// Share is 0 when the bucket itself decided: always for a Local, and
	// for a Handle whose executor answered. When a Manager's degraded mode
	// decided from this instance's local share instead (see Degrade), it is
	// the number of instances that share was cut for (at least 1): the
	// Probe and the Diagnostics then describe the share, core.Config.Share
	// of the limit, and a caller describing the whole limit multiplies by
	// it. Handle.Execute returns the same number for a batch.
	Share int
}

// Errors returned by buckets.
var (
	// ErrTokens: a token count was not positive.
	ErrTokens = errors.New("token count must be positive")
	// ErrOverdraftTooLarge: a wait would not fit in a time.Duration, so
	// nothing was consumed (ConsumeIgnoringRateLimits, Consume).
	ErrOverdraftTooLarge = errors.New("bucketgrid: overdraft wait exceeds the int64 range")
	// ErrExceedsCapacity: a blocking consumption asked for more tokens than a
	// bandwidth's capacity, so it could never succeed.
	ErrExceedsCapacity = errors.New("bucketgrid: tokens exceed capacity")
	// ErrNoQuorum: an executor that guards against split brain refused to
	// decide because it sees only a minority of its cluster (grid/olric's
	// Config.Quorum). It is no outage to fail open on — letting everyone
	// through would admit more than the second capacity the quorum exists to
	// prevent — so httplimit and the rate-limit service refuse it whatever
	// their failure mode; a Manager's degraded mode (WithDegrade) decides
	// from the local share instead.
	ErrNoQuorum = errors.New("bucketgrid: no quorum")
)
