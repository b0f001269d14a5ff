package clock

import (
	"context"
	"sync"
	"time"
)

// Fake is a manually driven wall clock for tests: it reads Unix nanoseconds
// and changes only when told to (Advance, Set, Sleep). Its Sleep advances the
// clock instead of waiting, so blocking bucket calls complete at once with
// exact waits. It is safe for concurrent use. The zero value reads the Unix
// epoch.
type Fake struct {
	mu  sync.Mutex
	now int64 // Unix nanoseconds; guarded by mu
}

// NewFake returns a fake clock reading start.
func NewFake(start time.Time) *Fake { return &Fake{now: start.UnixNano()} }

// Now returns the fake time in Unix nanoseconds.
func (c *Fake) Now() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Wall reports true: a Fake reads Unix time.
func (c *Fake) Wall() bool { return true }

// Advance moves the clock forward by d, or backward for a negative d (to
// test clock skew).
func (c *Fake) Advance(d time.Duration) {
	c.mu.Lock()
	c.now += int64(d)
	c.mu.Unlock()
}

// Set sets the clock to t.
func (c *Fake) Set(t time.Time) {
	c.mu.Lock()
	c.now = t.UnixNano()
	c.mu.Unlock()
}

// Sleep advances the clock by d and returns nil at once, or returns
// ctx.Err() without advancing when ctx is already done. A d ≤ 0 leaves the
// clock as it is: sleeping never moves a clock backward.
func (c *Fake) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d > 0 {
		c.Advance(d)
	}
	return nil
}

var _ Sleeper = (*Fake)(nil)
