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
	// timers waiting on the clock (After); guarded by mu
	timers map[*fakeTimer]struct{}
}

// fakeTimer is a channel to close once a Fake reads at least at.
type fakeTimer struct {
	at int64
	ch chan struct{}
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

// After returns a channel closed once the clock reads d later than now,
// when Advance, Set or Sleep moves it there (at once for a d ≤ 0), and a
// function that releases it unfired: see Timer.
func (c *Fake) After(d time.Duration) (<-chan struct{}, func()) {
	t := &fakeTimer{ch: make(chan struct{})}
	c.mu.Lock()
	defer c.mu.Unlock()
	t.at = c.now + int64(d)
	if d <= 0 {
		close(t.ch)
		return t.ch, func() {}
	}
	if c.timers == nil {
		c.timers = make(map[*fakeTimer]struct{})
	}
	c.timers[t] = struct{}{}
	return t.ch, func() {
		c.mu.Lock()
		delete(c.timers, t)
		c.mu.Unlock()
	}
}

// Timers returns the number of channels of After waiting on the clock: a
// test advances the clock once a background timer it means to fire waits.
func (c *Fake) Timers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// fire closes the channels of the timers due at c.now. Called with c.mu
// held.
func (c *Fake) fire() {
	for t := range c.timers {
		if t.at <= c.now {
			close(t.ch)
			delete(c.timers, t)
		}
	}
}

// Advance moves the clock forward by d, or backward for a negative d (to
// test clock skew).
func (c *Fake) Advance(d time.Duration) {
	c.mu.Lock()
	c.now += int64(d)
	c.fire()
	c.mu.Unlock()
}

// Set sets the clock to t.
func (c *Fake) Set(t time.Time) {
	c.mu.Lock()
	c.now = t.UnixNano()
	c.fire()
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

var (
	_ Sleeper = (*Fake)(nil)
	_ Timer   = (*Fake)(nil)
)
