// Package randconfig draws random bandwidths and configurations, extreme
// values included, for the property tests of core and its codec.
package randconfig

import (
	"fmt"
	"github.com/bucketgrid/bucketgrid/core"
	"math"
	"math/rand/v2"
	"time"
)

// Gen draws from R.
type Gen struct{ R *rand.Rand }

func (g Gen) Pick(vs ...int64) int64 { return vs[g.R.IntN(len(vs))] }

// Int64In returns a value in [lo, hi].
func (g Gen) Int64In(lo, hi int64) int64 {
	span := uint64(hi-lo) + 1
	if span == 0 { // the whole int64 range
		return int64(g.R.Uint64())
	}
	return lo + int64(g.R.Uint64N(span))
}

// Magnitude returns a positive value of a random order of magnitude up to max.
func (g Gen) Magnitude(maxV int64) int64 {
	bits := 1 + g.R.IntN(63)
	v := int64(g.R.Uint64N(1<<uint(bits-1))) + 1
	if v > maxV {
		v = 1 + v%maxV
	}
	return v
}

func (g Gen) Bandwidth(now int64, id string) core.Bandwidth {
	var period int64
	switch g.R.IntN(6) {
	case 0:
		period = g.Pick(1, 2, 3, 7)
	case 1:
		period = g.Pick(int64(time.Millisecond), int64(time.Second), int64(time.Minute), int64(time.Hour))
	case 2:
		period = g.Pick(math.MaxInt64, math.MaxInt64-1, math.MaxInt64/2, 1<<62)
	default:
		period = g.Magnitude(math.MaxInt64)
	}
	var tokens int64
	switch g.R.IntN(4) {
	case 0:
		tokens = 1
	case 1:
		tokens = period
	default:
		tokens = g.Magnitude(period)
	}
	var capacity int64
	switch g.R.IntN(5) {
	case 0:
		capacity = g.Pick(1, 2, 10)
	case 1:
		capacity = g.Pick(math.MaxInt64, math.MaxInt64-1, 1<<62)
	case 2:
		capacity = tokens
	default:
		capacity = g.Magnitude(math.MaxInt64)
	}
	var b core.Bandwidth
	switch g.R.IntN(8) {
	case 0, 1, 2, 3:
		b = core.Greedy(capacity, tokens, time.Duration(period))
	case 4, 5:
		b = core.Intervally(capacity, tokens, time.Duration(period))
	case 6:
		b = core.Bandwidth{Capacity: capacity, RefillTokens: tokens, RefillPeriod: time.Duration(period),
			Style: core.RefillIntervallyAligned, FirstRefill: g.FirstRefill(now)}
	case 7:
		b = core.Bandwidth{Capacity: capacity, RefillTokens: tokens, RefillPeriod: time.Duration(period),
			Style: core.RefillIntervallyAlignedAdaptive, FirstRefill: g.FirstRefill(now)}
	}
	if b.Style != core.RefillIntervallyAlignedAdaptive && g.R.IntN(3) == 0 {
		b = b.WithInitialTokens(g.Pick(0, 1, capacity, capacity/2, g.Int64In(0, capacity), math.MaxInt64))
	}
	return b.WithID(id)
}

// FirstRefill returns a valid first refill (at or after the epoch) near now,
// or the epoch itself, or one far from now when now is before the epoch.
func (g Gen) FirstRefill(now int64) int64 {
	if g.R.IntN(8) == 0 {
		return 0
	}
	if f := now + g.Int64In(-1<<40, 1<<40); f >= 0 {
		return f
	}
	return g.Int64In(0, 1<<40)
}

func (g Gen) Config(now int64) core.Config {
	n := 1 + g.R.IntN(3)
	var c core.Config
	for i := range n {
		id := ""
		if n > 1 || g.R.IntN(2) == 0 {
			id = fmt.Sprintf("b%d", g.R.IntN(4)*10+i) // unique within c
		}
		c.Bandwidths = append(c.Bandwidths, g.Bandwidth(now, id))
	}
	return c
}
