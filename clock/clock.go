// Package clock tells time for token buckets: a reading in nanoseconds and
// whether that reading is Unix time.
//
// Local buckets default to Monotonic, which wall-clock steps cannot disturb.
// Distributed buckets need Wall (or WallMillis): the side that executes a
// bucket check stamps it with Unix time, so every process reading the same
// stored bucket agrees on what the stored times mean. Tests use a Fake, which
// also makes blocking calls return at once (see Sleep).
//
// The package imports only the standard library, so every module of
// bucketgrid, the .wasm filter included, shares this one clock type.
package clock

import (
	"context"
	"time"
)

// Clock tells time in nanoseconds. Implementations must be safe for
// concurrent use.
type Clock interface {
	// Now returns the current time in nanoseconds: Unix nanoseconds when
	// Wall reports true, otherwise nanoseconds since an arbitrary fixed
	// origin (such as process start).
	Now() int64
	// Wall reports whether Now is Unix time. Aligned refill, whose first
	// refill is a wall-clock instant, needs a clock that reports true.
	Wall() bool
}

// Sleeper is implemented by clocks that control waiting too, such as Fake:
// Sleep (the function) then waits on the clock instead of a timer.
type Sleeper interface {
	// Sleep waits d of the clock's time, or until ctx is done, in which case
	// it returns ctx.Err().
	Sleep(ctx context.Context, d time.Duration) error
}

// Timer is implemented by clocks that fire timers on their own time, such
// as Fake: After (the function) then waits on the clock instead of a timer
// of the wall's time.
type Timer interface {
	// After returns a channel closed once d of the clock's time has passed
	// (at once for a d ≤ 0), and a function that releases it unfired.
	After(d time.Duration) (<-chan struct{}, func())
}

// After returns a channel closed once d has passed on c's terms, and a
// stop function releasing it unfired (calling it after the channel closed
// is harmless): c.After(d) when c is a Timer (a Fake closes it when
// advanced past d), otherwise a timer of the wall's time.
func After(c Clock, d time.Duration) (<-chan struct{}, func()) {
	if t, ok := c.(Timer); ok {
		return t.After(d)
	}
	ch := make(chan struct{})
	t := time.AfterFunc(d, func() { close(ch) })
	return ch, func() { t.Stop() }
}

// monoBase is the origin of Monotonic's readings. time.Since(monoBase) uses
// the monotonic clock reading that time.Now records, and reads only the
// monotonic clock: about half of time.Now's cost (BenchmarkNow). Reading
// runtime.nanotime through go:linkname measured no cheaper on the project's
// machine and would lose testing/synctest's fake time.
var monoBase = time.Now()

type monotonic struct{}

func (monotonic) Now() int64 { return int64(time.Since(monoBase)) }
func (monotonic) Wall() bool { return false }

type wallNanos struct{}

func (wallNanos) Now() int64 { return time.Now().UnixNano() }
func (wallNanos) Wall() bool { return true }

type wallMillis struct{}

func (wallMillis) Now() int64 { return time.Now().UnixMilli() * int64(time.Millisecond) }
func (wallMillis) Wall() bool { return true }

// Monotonic returns the clock of local buckets by default: nanoseconds since
// this package was initialised, read from the monotonic clock, so stepping
// the wall clock (NTP, a manual change) never mints or withholds tokens. Its
// Wall method reports false. Every call returns an equal value, so a caller
// may compare a Clock with Monotonic() to detect the default.
func Monotonic() Clock { return monotonic{} }

// Wall returns a clock reading Unix time in nanoseconds (time.Now().UnixNano())
// whose Wall method reports true. Distributed executors use it. Every call
// returns an equal value.
func Wall() Clock { return wallNanos{} }

// WallMillis returns Wall truncated to whole milliseconds, as Bucket4j's
// default clock (System.currentTimeMillis); use it to reproduce Bucket4j's
// results exactly. Its Wall method reports true. Every call returns an equal
// value.
func WallMillis() Clock { return wallMillis{} }

// Func adapts a function to a Clock: Now calls now, and Wall returns wall,
// which must say whether now returns Unix nanoseconds. now must be non-nil
// and safe for concurrent use.
func Func(now func() int64, wall bool) Clock { return funcClock{now, wall} }

type funcClock struct {
	now  func() int64
	wall bool
}

func (c funcClock) Now() int64 { return c.now() }
func (c funcClock) Wall() bool { return c.wall }

// Sleep waits d on c's terms and returns nil, or ctx.Err() as soon as ctx is
// done. When c is a Sleeper, Sleep is c.Sleep(ctx, d) (a Fake advances
// instead of waiting); otherwise it waits on a timer. If ctx is already done,
// Sleep returns ctx.Err() without waiting; otherwise a d ≤ 0 returns nil at
// once.
func Sleep(ctx context.Context, c Clock, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s, ok := c.(Sleeper); ok {
		return s.Sleep(ctx, d)
	}
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
