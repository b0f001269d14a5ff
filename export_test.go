package bucketgrid

import "time"

// Tuned returns d with the knobs only tests turn (0 keeps a default): the
// outages in a row that open a breaker, the time between probes, and the
// bound on local buckets.
func (d Degrade) Tuned(failures int, probe time.Duration, maxKeys int) Degrade {
	d.failures, d.probe, d.maxKeys = failures, probe, maxKeys
	return d
}
