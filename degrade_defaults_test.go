package bucketgrid

import (
	"testing"
	"time"
)

// TestDegradeDefaults keeps Degrade's field docs true: the zero value
// selects the figures they state.
func TestDegradeDefaults(t *testing.T) {
	g := newDegrader(NewManager(nil), Degrade{})
	if g.timeout != 100*time.Millisecond || g.failures != 3 || g.probe != int64(250*time.Millisecond) || g.maxKeys != 100_000 {
		t.Fatalf("zero Degrade: timeout %v, failures %d, probe %v, max keys %d; want 100ms, 3, 250ms, 100000",
			g.timeout, g.failures, time.Duration(g.probe), g.maxKeys)
	}
}
