// Package retry decides what a compare-and-swap executor does after losing a
// race: stop, retry at once, or retry after a delay.
//
// The default, Backoff, is exponential backoff with full jitter bounded by a
// wall-clock budget and a floor of attempts: on a hot key attempt counts
// alone reject requests while tokens remain, immediate retries burn the
// store, and on a loaded host a wall-clock budget alone passes while the
// process waits for a CPU, not while it loses races. The request's context
// deadline always wins over any strategy: the executor never sleeps past it.
package retry

import (
	"math/rand/v2"
	"time"
)

// Action is what to do after a lost race.
type Action uint8

const (
	// Stop gives up; the executor returns cas.ErrConflict.
	Stop Action = iota
	// RetryNow retries at once.
	RetryNow
	// RetryAfter retries after Decision.Delay.
	RetryAfter
)

// Decision is a Strategy's answer.
type Decision struct {
	Action Action
	Delay  time.Duration // for RetryAfter
}

// Metadata describes the request that lost a race.
type Metadata struct {
	// Attempt is the number of attempts made so far, at least 1.
	Attempt int
	// Key is the bucket key.
	Key string
	// Start is when the first attempt began and Now is the current time, both
	// in the executor's clock (Unix nanoseconds).
	Start, Now int64
}

// Strategy decides after each lost race. Implementations must be safe for
// concurrent use.
type Strategy interface {
	Next(m Metadata) Decision
}

// Func adapts a function to a Strategy.
type Func func(m Metadata) Decision

// Next calls f.
func (f Func) Next(m Metadata) Decision { return f(m) }

// Immediate retries at once until maxAttempts attempts have been made, then
// stops. It is Bucket4j's historical default (with a bound added): cheap at
// low contention, a livelock risk on hot keys.
func Immediate(maxAttempts int) Strategy {
	return Func(func(m Metadata) Decision {
		if m.Attempt >= maxAttempts {
			return Decision{Action: Stop}
		}
		return Decision{Action: RetryNow}
	})
}

// BackoffConfig configures Backoff. Zero fields take the defaults of
// DefaultBackoffConfig.
type BackoffConfig struct {
	// Base is the delay ceiling of the first retry; it doubles per attempt.
	Base time.Duration
	// Cap bounds the delay ceiling.
	Cap time.Duration
	// Budget bounds the time from the first attempt: once MinAttempts
	// attempts are made, no retry starts after it and no delay reaches past
	// it.
	Budget time.Duration
	// MinAttempts is the number of attempts made whatever the time: the
	// budget stops nothing before. 1 lets the budget alone decide.
	MinAttempts int
	// Rand returns a uniform value in [0, n); nil uses math/rand/v2. Set it
	// for deterministic tests.
	Rand func(n int64) int64
}

// DefaultBackoffConfig returns the defaults: 50 µs base, 10 ms cap, 500 ms
// budget, 8 attempts at least. The budget is generous on purpose: a
// request's context deadline (an HTTP middleware's, say) always ends the
// retries sooner, and a shorter budget made 16 % of checks give up with 8
// clients on a store with millisecond round trips (grid/mongo's benchmark
// on FerretDB). The floor is there for loaded hosts: a process that waits
// hundreds of milliseconds for a CPU between its read and its write spends
// the budget in 2 attempts, and the rate-limit service then refused
// requests of two instances sharing one Redis key, each of which had lost
// one race (cmd/bucketgrid's TestRedisBackend with 8 busy loops on 2
// cores). Lost races, not time, measure contention: 8 in a row is what a
// request on a key that 2 writers share rarely loses.
func DefaultBackoffConfig() BackoffConfig {
	return BackoffConfig{Base: 50 * time.Microsecond, Cap: 10 * time.Millisecond, Budget: 500 * time.Millisecond, MinAttempts: 8}
}

// Backoff returns exponential backoff with full jitter: the delay before
// attempt k+1 is uniform in [0, min(Cap, Base·2^(k-1))], and once
// MinAttempts attempts are made no retry is scheduled past Budget from the
// start.
func Backoff(c BackoffConfig) Strategy {
	d := DefaultBackoffConfig()
	if c.Base <= 0 {
		c.Base = d.Base
	}
	if c.Cap <= 0 {
		c.Cap = d.Cap
	}
	if c.Budget <= 0 {
		c.Budget = d.Budget
	}
	if c.MinAttempts <= 0 {
		c.MinAttempts = d.MinAttempts
	}
	if c.Rand == nil {
		c.Rand = rand.Int64N
	}
	return Func(func(m Metadata) Decision {
		left := int64(c.Budget) - (m.Now - m.Start)
		floor := m.Attempt < c.MinAttempts
		if left <= 0 && !floor {
			return Decision{Action: Stop}
		}
		ceil := int64(c.Base)
		for i := 1; i < m.Attempt && ceil < int64(c.Cap); i++ {
			ceil *= 2
		}
		ceil = min(ceil, int64(c.Cap))
		if !floor {
			ceil = min(ceil, left)
		}
		return Decision{Action: RetryAfter, Delay: time.Duration(c.Rand(ceil + 1))}
	})
}

// Default returns Backoff(DefaultBackoffConfig()).
func Default() Strategy { return Backoff(BackoffConfig{}) }
