package couchbase_test

import (
	"errors"
	"testing"

	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/grid/couchbase"
	"github.com/bucketgrid/bucketgrid/internal/harness/storetest"
)

// newStoreOn connects to srv and returns a store whose keys carry a prefix
// unique to this call.
func newStoreOn(t testing.TB, srv server, opts ...couchbase.Option) *couchbase.Store {
	t.Helper()
	coll := connect(t, srv)
	p := prefix()
	opts = append([]couchbase.Option{couchbase.WithKeyMapping(func(k string) string { return p + k })}, opts...)
	s, err := couchbase.New(coll, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestForeignDocumentIsCorrupt: a document that is not binary (written as
// JSON by someone else) is a corrupt record, never garbage state nor an
// outage. The store contract itself, errors included, is tck's (TestTCK).
func TestForeignDocumentIsCorrupt(t *testing.T) {
	ctx := storetest.Context(t)
	coll := connect(t, couchbaseServer(t))
	p := prefix()
	if _, err := coll.Upsert(p+"json", map[string]int{"a": 1}, nil); err != nil {
		t.Fatal(err)
	}
	s2, _ := couchbase.New(coll, couchbase.WithKeyMapping(func(k string) string { return p + k }))
	if _, _, _, err := s2.Get(ctx, "json"); err == nil {
		t.Error("JSON document read as binary state without error")
	} else if !errors.Is(err, core.ErrCorruptState) {
		t.Errorf("JSON document: %v, want an error wrapping core.ErrCorruptState (a corrupt record, never an outage)", err)
	}
	ops := []*cas.Op{{Kind: cas.OpGet, Key: "json"}}
	if err := s2.Batch(ctx, ops); err != nil || !errors.Is(ops[0].Result.Err, core.ErrCorruptState) {
		t.Errorf("JSON document in a batch: %v, %v; want an op error wrapping core.ErrCorruptState", err, ops[0].Result.Err)
	}
}
