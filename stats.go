package bucketgrid

import (
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/bucketgrid/bucketgrid/core"
)

// Stats counts what a Manager did that its callers did not ask for: the
// root layer's one Stats (an executor's own work is counted by its package,
// as cas.Stats; a front door's decisions by the door, as httplimit.Stats).
type Stats struct {
	// CorruptReplaced counts requests that met a corrupt stored record by
	// default and went on with a new bucket in its place. Two
	// processes meeting one record may both count it; the compare-and-swap
	// lets only one of them write.
	CorruptReplaced int64
	// The counters of WithDegrade, zero without it. Degraded counts
	// requests decided from a local share instead of by the executor (every
	// other request was decided by the executor or failed).
	Degraded int64
	// BreakerOpens counts breakers opened; OpenBreakers is the number open
	// now.
	BreakerOpens int64
	OpenBreakers int
	// LocalBuckets is the number of local shares held now; Dropped counts
	// those dropped past the bound on local buckets (100,000), uncharged.
	LocalBuckets int
	Dropped      int64
	// Charged counts the tokens consumed locally that were charged to the
	// real buckets once their backend answered again; ChargeFailed counts
	// background charges that failed (their tokens stay to be charged with
	// the key's next request, or a background retry every 250 ms).
	Charged      int64
	ChargeFailed int64
	// Instances is the number of instances a local share is cut for now
	// (Degrade.Instances, or the executor's LiveInstances).
	Instances int
}

// Stats returns the counters so far.
func (m *Manager) Stats() Stats {
	s := Stats{CorruptReplaced: m.corrupt.replaced.Load()}
	if g := m.degrade; g != nil {
		s.Degraded, s.BreakerOpens, s.OpenBreakers = g.degraded.Load(), g.opened.Load(), g.breakers.openCount()
		s.LocalBuckets, s.Dropped = int(g.n.Load()), g.dropped.Load()
		s.Charged, s.ChargeFailed = g.charged.Load(), g.chargeFailed.Load()
		s.Instances = g.instanceCount()
	}
	return s
}

// maxLoggedKeys bounds the keys whose corrupt records a Manager remembers
// having logged. Past it, replacements are still counted but no longer
// logged, so a store that keeps returning corrupt bytes cannot grow memory.
const maxLoggedKeys = 1024

// corruptLog counts corrupt records replaced and logs each key once.
type corruptLog struct {
	logger   *slog.Logger
	replaced atomic.Int64
	mu       sync.Mutex
	logged   map[string]struct{} // redacted keys; guarded by mu
}

// replacedRecord records that key's corrupt record, which failed to decode
// with message why, was replaced by a new bucket.
func (c *corruptLog) replacedRecord(key, why string) {
	c.replaced.Add(1)
	redacted := core.RedactKey(key)
	c.mu.Lock()
	_, seen := c.logged[redacted]
	full := len(c.logged) >= maxLoggedKeys
	if !seen && !full {
		if c.logged == nil {
			c.logged = make(map[string]struct{})
		}
		c.logged[redacted] = struct{}{}
	}
	c.mu.Unlock()
	if seen || full {
		return
	}
	c.logger.Warn("bucketgrid: corrupt stored bucket replaced by a new one (logged once per key)",
		"key", redacted, "cause", why)
}
