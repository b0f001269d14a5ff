package localmap

import (
	"time"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/clock"
)

// Option configures New. Its own type, so that the compiler refuses an
// option of another constructor (bucketgrid.WithClock is one of
// bucketgrid's).
type Option func(*options)

type options struct {
	clock      clock.Clock
	listener   bucketgrid.Listener
	maxEntries int
	idle       time.Duration
}

// WithClock makes the buckets and idle expiry tell time by c (default
// clock.Monotonic(); nil selects it). Aligned refill styles need a clock
// whose Wall method reports true, such as clock.Wall() or a *clock.Fake.
func WithClock(c clock.Clock) Option { return func(o *options) { o.clock = c } }

// WithListener makes every bucket of the map report its events to l; nil,
// the default, reports nothing. See bucketgrid.Listener.
func WithListener(l bucketgrid.Listener) Option { return func(o *options) { o.listener = l } }

// WithMaxEntries bounds the number of buckets the map holds; n < 1 means 1.
// The default is DefaultMaxEntries. The map is split into shards of
// n/shards entries each, so it may begin evicting slightly before it holds
// n buckets, never after.
func WithMaxEntries(n int) Option { return func(o *options) { o.maxEntries = max(n, 1) } }

// WithIdleTimeout expires a bucket that has not been looked up for d
// (Caffeine's expireAfterAccess); d ≤ 0, the default, expires nothing for
// idleness (the bound still applies). Lookups record their time only when
// the record lags by d/64 (at most 1 ms), so a bucket may expire up to that
// much early.
func WithIdleTimeout(d time.Duration) Option { return func(o *options) { o.idle = max(d, 0) } }
