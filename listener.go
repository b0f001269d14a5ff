package bucketgrid

import "sync/atomic"

// Listener observes a bucket's events. Methods are called synchronously on
// the caller's goroutine and must be fast and safe for concurrent use.
type Listener interface {
	// OnConsumed is called when tokens were consumed.
	OnConsumed(tokens int64)
	// OnRejected is called when a consumption was refused.
	OnRejected(tokens int64)
	// OnParked is called before a blocking operation waits nanos.
	OnParked(nanos int64)
	// OnInterrupted is called when a blocking wait ended early with err
	// (context cancellation or deadline).
	OnInterrupted(err error)
	// OnDelayed is called when a scheduled consumption is delayed by nanos.
	OnDelayed(nanos int64)
}

// CountingListener is a ready-made Listener that counts events. The zero
// value is ready to use.
type CountingListener struct {
	consumed, rejected, parked, interrupted, delayed atomic.Int64
}

// OnConsumed adds tokens to the consumed count.
func (l *CountingListener) OnConsumed(tokens int64) { l.consumed.Add(tokens) }

// OnRejected adds tokens to the rejected count.
func (l *CountingListener) OnRejected(tokens int64) { l.rejected.Add(tokens) }

// OnParked adds nanos to the parked time.
func (l *CountingListener) OnParked(nanos int64) { l.parked.Add(nanos) }

// OnInterrupted counts one interruption.
func (l *CountingListener) OnInterrupted(error) { l.interrupted.Add(1) }

// OnDelayed adds nanos to the delayed time.
func (l *CountingListener) OnDelayed(nanos int64) { l.delayed.Add(nanos) }

// Consumed returns the tokens consumed so far.
func (l *CountingListener) Consumed() int64 { return l.consumed.Load() }

// Rejected returns the tokens rejected so far.
func (l *CountingListener) Rejected() int64 { return l.rejected.Load() }

// Parked returns the nanoseconds spent parked so far.
func (l *CountingListener) Parked() int64 { return l.parked.Load() }

// Interrupted returns the number of interrupted waits.
func (l *CountingListener) Interrupted() int64 { return l.interrupted.Load() }

// Delayed returns the nanoseconds of delay so far.
func (l *CountingListener) Delayed() int64 { return l.delayed.Load() }

// nopListener is the default.
type nopListener struct{}

func (nopListener) OnConsumed(int64)    {}
func (nopListener) OnRejected(int64)    {}
func (nopListener) OnParked(int64)      {}
func (nopListener) OnInterrupted(error) {}
func (nopListener) OnDelayed(int64)     {}
