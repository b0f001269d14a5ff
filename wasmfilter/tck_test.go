package wasmfilter

import (
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/tck"
	"github.com/bucketgrid/bucketgrid/wasmfilter/internal/shareddata"
)

// realTimeHost is a Host whose clock is the real wall clock, for the kit's
// real-time TTL checks; only the shared-data calls are used.
type realTimeHost struct{ fakeHost }

func (realTimeHost) Now() int64 { return time.Now().UnixNano() }

func TestStoreTCK(t *testing.T) {
	tck.RunStore(t, func(t *testing.T) cas.Store {
		h := &realTimeHost{fakeHost{shared: shareddata.New()}}
		return NewStore(h, "tck", 1<<16, h.Now)
	})
}
