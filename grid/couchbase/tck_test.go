package couchbase_test

import (
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/tck"
)

// TestTCK runs the whole kit. Couchbase expiry has one-second resolution.
func TestTCK(t *testing.T) {
	srv := couchbaseServer(t)
	tck.RunStore(t, func(t *testing.T) cas.Store {
		return newStoreOn(t, srv)
	}, tck.WithTTLResolution(time.Second), tck.WithContention(4, 100), tck.WithProbe(4, 250))
}
