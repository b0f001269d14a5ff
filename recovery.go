package bucketgrid

import (
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/bucketgrid/bucketgrid/core"
)

// ManagerStats counts what a Manager did that its callers did not ask for.
type ManagerStats struct {
	// CorruptReplaced counts requests that met a corrupt stored record under
	// RecoveryReconstruct and went on with a new bucket in its place. Two
	// processes meeting one record may both count it; the compare-and-swap
	// lets only one of them write.
	CorruptReplaced int64
}

// Stats returns the counters so far.
func (m *Manager) Stats() ManagerStats {
	return ManagerStats{CorruptReplaced: m.corrupt.replaced.Load()}
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
