package wasmfilter

import (
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/tck"
	"github.com/bucketgrid/bucketgrid/wasmfilter/internal/shareddata"
)

// realTimeHost is a Host whose clock is the real wall clock, for the kit's
// real-time TTL checks; only the shared-data calls are used.
type realTimeHost struct{ fakeHost }

func (realTimeHost) Now() int64 { return time.Now().UnixNano() }

// TestStoreTCK runs the kit on a prepared store, as the filter runs it: the
// first worker's Prepare creates every slot, so no insert is an
// unconditional write. (Unprepared, two racing creators can both "insert" —
// Envoy's cas 0 — and the kit's linearizability check catches it.)
func TestStoreTCK(t *testing.T) {
	tck.RunStore(t, func(t *testing.T) cas.Store {
		h := &realTimeHost{fakeHost{shared: shareddata.New()}}
		s := NewStore(h, "tck", StoreConfig{Slots: 1 << 12, Clock: clock.Func(h.Now, true)})
		if err := s.Prepare(); err != nil {
			t.Fatal(err)
		}
		return s
	})
}
