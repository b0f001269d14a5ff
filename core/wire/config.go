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

// replacesItself reports whether replacing b's configuration by itself
// would leave its state as it is: every bandwidth takes over from itself
// (IDs are unique, so only several bandwidths without one fail to; see
// core.TokensInheritance) and none holds more than its capacity (after
// ForceAddTokens), which a replacement caps.
func replacesItself(b *core.State) bool {
	anonymous := 0
	for i := range b.Bands {
		bw := &b.Config.Bandwidths[i]
		if bw.ID == "" {
			anonymous++
		}
		if b.Bands[i].Size > bw.Capacity || anonymous > 1 {
			return false
		}
	}
	return true
}
