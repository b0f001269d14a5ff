package bucketgrid

import (
	"sync/atomic"
	"time"
)

// CountingListener is a Listener that counts events, for the tests of
// this package and, through the test build, of package bucketgrid_test.
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
