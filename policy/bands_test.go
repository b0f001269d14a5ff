package policy

import (
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/core"
)

// TestBandsAtTheExecutingSidesTime: the bands of a snapshot are the
// executor's, whatever the caller's clock says: one ahead mints no token
// and shortens no wait, one behind lengthens none.
func TestBandsAtTheExecutingSidesTime(t *testing.T) {
	cfg := core.Config{Bandwidths: []core.Bandwidth{core.Greedy(10, 10, 10*time.Second),
		core.Intervally(100, 100, time.Minute)}}
	exec := int64(1_000_000_000_000)
	s := core.NewState(cfg, exec)
	s.TryConsume(10, exec) // greedy band empty: one token a second
	d := s.Diagnose(exec)
	for _, skew := range []time.Duration{0, 5 * time.Second, -5 * time.Second} {
		bs := Bands(&d, 1, exec+int64(skew))
		if bs[0].Available != 0 || bs[0].Wait != time.Second {
			t.Errorf("skew %v: greedy band %+v, want 0 tokens, 1s to the next", skew, bs[0])
		}
		if bs[1].Available != 90 || bs[1].Wait != time.Minute {
			t.Errorf("skew %v: intervally band %+v, want 90 tokens, the next in a minute", skew, bs[1])
		}
	}
	// only intervally bands: the caller's clock, within the current period
	only := core.Config{Bandwidths: []core.Bandwidth{core.Intervally(5, 5, time.Minute)}}
	s = core.NewState(only, exec)
	s.TryConsume(5, exec)
	d = s.Diagnose(exec)
	for _, tc := range []struct {
		now  int64
		want time.Duration
	}{{exec, time.Minute}, {exec + 20e9, 40 * time.Second}, {exec + 90e9, 1}, {exec - 30e9, time.Minute}} {
		if bs := Bands(&d, 1, tc.now); bs[0].Available != 0 || bs[0].Wait != tc.want {
			t.Errorf("now %+ds: %+v, want a wait of %v", (tc.now-exec)/1e9, bs[0], tc.want)
		}
	}
}
