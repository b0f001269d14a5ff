package olric

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/tck"
)

// TestTCK runs the compatibility kit against a 3-member cluster in this
// process, with requests issued from every member. One cluster serves every
// check (the kit uses keys unique to each check); its owners read the time
// of whichever check is running.
func TestTCK(t *testing.T) {
	var clock atomic.Pointer[func() int64]
	now := func() int64 { return (*clock.Load())() }
	wall := func() int64 { return time.Now().UnixNano() }
	clock.Store(&wall)
	ms := startCluster(t, 3, func(c *Config) { c.Clock = now })
	tck.Run(t, func(t *testing.T, c func() int64) []bucketgrid.Executor {
		clock.Store(&c)
		return []bucketgrid.Executor{ms[0], ms[1], ms[2]}
	})
}
