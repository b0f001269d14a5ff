package bucketgrid

import (
	"sync/atomic"
	"time"
)

// Listener observes a bucket's events, the same for a Local and a Handle.
// Methods are called synchronously on the caller's goroutine (for a Local,
// after its lock is released) and must be fast and safe for concurrent use.
//
// TryConsume, TryConsumeAndReturnRemaining and its verbose form report
// consumed or rejected n; TryConsumeAsMuchAsPossible reports consumed for a
// positive take; ConsumeIgnoringRateLimits reports consumed; Consume and
// TryConsumeWithin report rejected (a wait over maxWait), parked before a
// wait, interrupted when ctx ends during it, and consumed on success. A
// call that returns any other error reports nothing.
type Listener interface {
	// OnConsumed is called when tokens were consumed.
	OnConsumed(tokens int64)
	// OnRejected is called when a consumption was refused.
	OnRejected(tokens int64)
	// OnParked is called before a blocking operation waits d (always
	// positive).
	OnParked(d time.Duration)
	// OnInterrupted is called when a blocking wait ended early with err
	// (context cancellation or deadline).
	OnInterrupted(err error)
}

// CountingListener is a ready-made Listener that counts events. The zero
// value is ready to use.
type CountingListener struct {
	consumed, rejected, parked, interrupted atomic.Int64
}

// OnConsumed adds tokens to the consumed count.
func (l *CountingListener) OnConsumed(tokens int64) { l.consumed.Add(tokens) }

// OnRejected adds tokens to the rejected count.
func (l *CountingListener) OnRejected(tokens int64) { l.rejected.Add(tokens) }

// OnParked adds d to the parked time.
func (l *CountingListener) OnParked(d time.Duration) { l.parked.Add(int64(d)) }

// OnInterrupted counts one interruption.
func (l *CountingListener) OnInterrupted(error) { l.interrupted.Add(1) }

// Consumed returns the tokens consumed so far.
func (l *CountingListener) Consumed() int64 { return l.consumed.Load() }

// Rejected returns the tokens rejected so far.
func (l *CountingListener) Rejected() int64 { return l.rejected.Load() }

// Parked returns the total time blocking operations announced they would
// wait (the sum of OnParked's d), including waits later interrupted.
func (l *CountingListener) Parked() time.Duration { return time.Duration(l.parked.Load()) }

// Interrupted returns the number of interrupted waits.
func (l *CountingListener) Interrupted() int64 { return l.interrupted.Load() }

// nopListener is the default.
type nopListener struct{}

func (nopListener) OnConsumed(int64)       {}
func (nopListener) OnRejected(int64)       {}
func (nopListener) OnParked(time.Duration) {}
func (nopListener) OnInterrupted(error)    {}
