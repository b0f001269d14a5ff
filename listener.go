package bucketgrid

import (
	"time"
)

// Listener observes a bucket's events, the same for a Local and a Handle.
// Methods are called synchronously on the caller's goroutine (for a Local,
// after its lock is released) and must be fast and safe for concurrent use.
//
// TryConsume, TryConsumeAndReturnRemaining and its verbose form report
// consumed or rejected n; TryConsumeAsMuchAsPossible reports consumed for a
// positive take; ConsumeIgnoringRateLimits reports consumed; Consume reports
// rejected (a wait past ctx's deadline), parked before a wait, interrupted
// when ctx ends during it, and consumed on success. A
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

// nopListener is the default.
type nopListener struct{}

func (nopListener) OnConsumed(int64)       {}
func (nopListener) OnRejected(int64)       {}
func (nopListener) OnParked(time.Duration) {}
func (nopListener) OnInterrupted(error)    {}
