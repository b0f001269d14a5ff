package bucketgrid

import (
	"context"
	"sync"
	"time"
)

// Clock tells time in nanoseconds. Local buckets default to MonotonicClock;
// aligned refill styles need a clock whose Wall method reports true, since
// their first refill is a wall-clock instant.
type Clock interface {
	// Now returns the current time in nanoseconds.
	Now() int64
	// Wall reports whether Now is Unix time.
	Wall() bool
}

// Sleeper is implemented by clocks that control waiting too, such as
// FakeClock: blocking operations then wait on the clock instead of a timer.
type Sleeper interface {
	// Sleep waits d nanoseconds of the clock's time or until ctx is done.
	Sleep(ctx context.Context, d int64) error
}

var monoBase = time.Now()

type monotonic struct{}

func (monotonic) Now() int64  { return int64(time.Since(monoBase)) }
func (monotonic) Wall() bool  { return false }
func (wallNanos) Now() int64  { return time.Now().UnixNano() }
func (wallNanos) Wall() bool  { return true }
func (wallMillis) Now() int64 { return time.Now().UnixMilli() * int64(time.Millisecond) }
func (wallMillis) Wall() bool { return true }

type wallNanos struct{}
type wallMillis struct{}

// MonotonicClock returns the default clock of local buckets: nanoseconds since
// process start from the monotonic clock, immune to wall-clock steps.
func MonotonicClock() Clock { return monotonic{} }

// WallClock returns Unix time in nanoseconds. Distributed executors use it.
func WallClock() Clock { return wallNanos{} }

// MillisClock returns Unix time truncated to milliseconds, as Bucket4j's
// default clock; use it to reproduce Bucket4j's results exactly.
func MillisClock() Clock { return wallMillis{} }

// ClockFunc adapts a function to a Clock; wall says whether it returns Unix
// time.
func ClockFunc(now func() int64, wall bool) Clock { return funcClock{now, wall} }

type funcClock struct {
	now  func() int64
	wall bool
}

func (c funcClock) Now() int64 { return c.now() }
func (c funcClock) Wall() bool { return c.wall }

// FakeClock is a manually driven wall clock for tests. Sleep advances it, so
// blocking operations complete at once with exact waits. It is safe for
// concurrent use.
type FakeClock struct {
	mu  sync.Mutex
	now int64
}

// NewFakeClock returns a fake clock reading start (Unix nanoseconds).
func NewFakeClock(start time.Time) *FakeClock { return &FakeClock{now: start.UnixNano()} }

// Now returns the fake time.
func (c *FakeClock) Now() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Wall reports true: the fake clock reads Unix time.
func (c *FakeClock) Wall() bool { return true }

// Advance moves the clock forward (or backward, for negative d).
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now += int64(d)
	c.mu.Unlock()
}

// Set sets the clock to t.
func (c *FakeClock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t.UnixNano()
	c.mu.Unlock()
}

// Sleep advances the clock by d unless ctx is already done.
func (c *FakeClock) Sleep(ctx context.Context, d int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.Advance(time.Duration(d))
	return nil
}

// sleep waits d nanoseconds on clock's terms.
func sleep(ctx context.Context, clock Clock, d int64) error {
	if s, ok := clock.(Sleeper); ok {
		return s.Sleep(ctx, d)
	}
	t := time.NewTimer(time.Duration(d))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
