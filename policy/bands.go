package policy

import (
	"math"
	"time"

	"github.com/bucketgrid/bucketgrid/core"
)

// Band is one bandwidth of a bucket after an operation, as rate-limit
// headers describe it.
type Band struct {
	// Available is the bandwidth's tokens (negative in overdraft).
	Available int64
	// Wait is how long until the bandwidth holds the request's cost when it
	// holds less (math.MaxInt64, the largest Duration, when the cost exceeds
	// its capacity), otherwise until it gains its next token; 0 when it is
	// full.
	Wait time.Duration
}

// Bands returns the Band of each bandwidth of d, the diagnostics an
// executor answered a verbose request of cost tokens with; nil when d holds
// no bandwidth state. It is the one place that slices a snapshot into
// bandwidths, with core's own arithmetic on single-bandwidth copies.
//
// Every value is at the executing side's time: tokens are the snapshot's
// own, and waits are counted from the moment the executor took it, which a
// greedy bandwidth records (the executor refilled it then). When every
// bandwidth refills intervally, that moment is known only within the
// current period, and now (the caller's clock) is taken, clamped into it,
// so no clock skew mints a token or moves a refill across a boundary.
func Bands(d *core.Diagnostics, cost, now int64) []Band {
	bws := d.State.Config.Bandwidths
	if len(bws) == 0 || len(d.State.Bands) != len(bws) || len(d.Available) != len(bws) {
		return nil
	}
	at := snapshotTime(&d.State, now)
	out := make([]Band, len(bws))
	for i := range bws {
		one := core.State{Config: core.Config{Bandwidths: bws[i : i+1]}, Bands: d.State.Bands[i : i+1]}
		avail := d.Available[i]
		out[i].Available = avail
		var want int64
		switch {
		case avail < cost:
			want = cost
		case avail < bws[i].Capacity:
			want = avail + 1
		default:
			continue // full: nothing more to come
		}
		if want > bws[i].Capacity {
			out[i].Wait = math.MaxInt64
			continue
		}
		out[i].Wait = one.EstimateAbilityToConsume(want, at).WaitForRefill
	}
	return out
}

// snapshotTime returns the executing side's time of the snapshot s: the
// last refill of its greedy bandwidths, or now clamped into the current
// period of its intervally ones.
func snapshotTime(s *core.State, now int64) int64 {
	var last, period int64 = math.MinInt64, math.MaxInt64
	for i := range s.Bands {
		bw := &s.Config.Bandwidths[i]
		if bw.Style == core.RefillGreedy {
			return s.Bands[i].LastRefill
		}
		last = max(last, s.Bands[i].LastRefill)
		period = min(period, int64(bw.RefillPeriod))
	}
	if now < last {
		return last
	}
	if now-last >= period {
		return last + period - 1
	}
	return now
}
