package olric

import (
	"sync/atomic"
	"testing"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/tck"
)

// TestTCK runs the compatibility kit against a 3-member cluster in this
// process, with requests issued from every member. One cluster serves every
// check (the kit uses keys unique to each check); its owners read the time
// of whichever check is running.
func TestTCK(t *testing.T) {
	var current atomic.Pointer[clock.Clock]
	wall := clock.Wall()
	current.Store(&wall)
	now := clock.Func(func() int64 { return (*current.Load()).Now() }, true)
	ms := startCluster(t, 3, func(c *Config) { c.Clock = now })
	tck.Run(t, func(t *testing.T, c clock.Clock) []bucketgrid.Executor {
		current.Store(&c)
		return []bucketgrid.Executor{ms[0], ms[1], ms[2]}
	})
}
