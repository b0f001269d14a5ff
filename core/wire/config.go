package wire

import "github.com/bucketgrid/bucketgrid/core"

// What the protocol needs to know about a configuration beyond core's
// exported model.

// aligned reports whether s refills on a wall-clock alignment, so that a
// bandwidth record carries its first refill time.
func aligned(s core.RefillStyle) bool {
	return s == core.RefillIntervallyAligned || s == core.RefillIntervallyAlignedAdaptive
}

// minCapacity returns the smallest capacity of c, which must have a bandwidth.
func minCapacity(c *core.Config) int64 {
	m := c.Bandwidths[0].Capacity
	for i := 1; i < len(c.Bandwidths); i++ {
		m = min(m, c.Bandwidths[i].Capacity)
	}
	return m
}

// startsAboveCapacity reports whether a bandwidth of c starts with more
// tokens than its capacity (explicit initial tokens).
func startsAboveCapacity(c *core.Config) bool {
	for i := range c.Bandwidths {
		if b := &c.Bandwidths[i]; b.HasInitialTokens && b.InitialTokens > b.Capacity {
			return true
		}
	}
	return false
}
