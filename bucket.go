package bucketgrid

import (
	"context"
	"errors"
	"time"

	"github.com/bucketgrid/bucketgrid/core"
)

// Bucket is a token bucket, local or distributed. Every method takes a
// context (a distributed call may block on I/O) and returns an error last (a
// local bucket only fails on invalid arguments). Token counts must be
// positive.
type Bucket interface {
	// TryConsume takes n tokens if they are available now.
	TryConsume(ctx context.Context, n int64) (bool, error)
	// TryConsumeAndReturnRemaining is TryConsume reporting the remaining
	// tokens and, when refused, how long until the request could succeed.
	TryConsumeAndReturnRemaining(ctx context.Context, n int64) (core.Probe, error)
	// EstimateAbilityToConsume reports whether n tokens could be taken now,
	// and when, without taking them.
	EstimateAbilityToConsume(ctx context.Context, n int64) (core.Estimate, error)
	// TryConsumeAsMuchAsPossible takes up to limit tokens (math.MaxInt64 for
	// no limit) and returns how many it took.
	TryConsumeAsMuchAsPossible(ctx context.Context, limit int64) (int64, error)
	// AddTokens adds n tokens, capped at capacity.
	AddTokens(ctx context.Context, n int64) error
	// ForceAddTokens adds n tokens even beyond capacity.
	ForceAddTokens(ctx context.Context, n int64) error
	// ConsumeIgnoringRateLimits takes n tokens into overdraft if need be and
	// returns how long until the debt is repaid; ErrOverdraftTooLarge when the
	// wait would not fit in a time.Duration.
	ConsumeIgnoringRateLimits(ctx context.Context, n int64) (time.Duration, error)
	// Reset fills the bucket.
	Reset(ctx context.Context) error
	// AvailableTokens returns the available tokens (negative in overdraft).
	AvailableTokens(ctx context.Context) (int64, error)
	// ReplaceConfiguration switches the bucket to cfg, carrying tokens over by
	// strategy. An invalid cfg is rejected before anything is written.
	ReplaceConfiguration(ctx context.Context, cfg core.Config, strategy core.TokensInheritance) error
	// Consume takes n tokens, waiting as long as it takes; it returns ctx's
	// error if ctx ends first, having taken nothing.
	Consume(ctx context.Context, n int64) error
	// TryConsumeWithin takes n tokens if they become available within
	// maxWait, waiting for them; false when they would not.
	TryConsumeWithin(ctx context.Context, n int64, maxWait time.Duration) (bool, error)
	// Diagnose returns the configuration, state and per-bandwidth diagnostics.
	Diagnose(ctx context.Context) (core.Diagnostics, error)
	// TryConsumeAndReturnRemainingVerbose is TryConsumeAndReturnRemaining
	// with the diagnostics taken in the same atomic step: the verbose API.
	TryConsumeAndReturnRemainingVerbose(ctx context.Context, n int64) (core.Probe, core.Diagnostics, error)
}

// Errors returned by buckets.
var (
	// ErrTokens: a token count was not positive.
	ErrTokens = core.ErrTokens
	// ErrInvalidKey: a key the backend cannot hold (see core.KeyError): the
	// client's error, returned before any I/O and never retried.
	ErrInvalidKey = core.ErrInvalidKey
	// ErrOverdraftTooLarge: ConsumeIgnoringRateLimits would owe more than
	// fits in a time.Duration; nothing was consumed.
	ErrOverdraftTooLarge = errors.New("bucketgrid: overdraft wait exceeds the int64 range")
	// ErrExceedsCapacity: a blocking consumption asked for more tokens than a
	// bandwidth's capacity, so it could never succeed.
	ErrExceedsCapacity = errors.New("bucketgrid: tokens exceed capacity")
)
