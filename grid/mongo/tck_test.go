package mongo_test

import (
	"testing"

	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/tck"
)

// TestTCK runs the whole kit. Through FerretDB the client has one connection
// (maxPoolSize=1): FerretDB v1 applies a filtered ReplaceOne non-atomically
// across connections (see the package documentation and
// TestProbeDetectsFerretDBLostUpdates), and over a single connection its
// commands are serialised. On a real MongoDB pool size does not matter.
// The kit runs on the Batching store, so it checks the store's four
// methods, cas.Writer and cas.Batcher, and executors with memory and
// pipelining; without Batching the executors differ only in sending each
// operation alone.
func TestTCK(t *testing.T) {
	uri := mongoURI(t)
	tck.RunStore(t, func(t *testing.T) cas.Store {
		return newStoreURI(t, uri, 1).Batching()
	}, tck.WithContention(4, 50), tck.WithProbe(4, 100))
}

// TestTCKPostgreSQL runs the whole kit on FerretDB's PostgreSQL handler,
// through one connection as TestTCK: it is not atomic across connections
// either (TestProbeDetectsFerretDBLostUpdates).
func TestTCKPostgreSQL(t *testing.T) {
	uri := mongoPGURI(t)
	tck.RunStore(t, func(t *testing.T) cas.Store {
		return newStoreURI(t, uri, 1).Batching()
	}, tck.WithContention(4, 50), tck.WithProbe(4, 100))
}
