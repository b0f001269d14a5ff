package couchbase_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/grid/couchbase"
)

func newStore(t testing.TB, opts ...couchbase.Option) *couchbase.Store {
	t.Helper()
	return newStoreOn(t, couchbaseServer(t), opts...)
}

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

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestContract checks the cas.Store contract directly; TestTCK runs the
// shared kit on top.
func TestContract(t *testing.T) {
	s := newStore(t)
	ctx := ctxT(t)
	mustGet := func(key string) ([]byte, cas.Version, bool) {
		t.Helper()
		d, v, found, err := s.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return d, v, found
	}
	must := func(ok bool, err error) bool {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}

	if _, _, found := mustGet("k"); found {
		t.Fatal("absent key found")
	}
	if !must(s.Insert(ctx, "k", []byte("a"), 0)) {
		t.Fatal("insert of an absent key lost")
	}
	if must(s.Insert(ctx, "k", []byte("b"), 0)) {
		t.Fatal("second insert won")
	}
	d, v1, found := mustGet("k")
	if !found || !bytes.Equal(d, []byte("a")) {
		t.Fatalf("get = %q, %v", d, found)
	}
	if must(s.Replace(ctx, "k", []byte("x"), v1+7, 0)) {
		t.Fatal("replace with a wrong version won")
	}
	if must(s.Replace(ctx, "k", []byte("x"), 0, 0)) {
		t.Fatal("replace with version 0 won")
	}
	if !must(s.Replace(ctx, "k", []byte("c"), v1, 0)) {
		t.Fatal("replace with the current version lost")
	}
	d, v2, _ := mustGet("k")
	if !bytes.Equal(d, []byte("c")) || v2 == v1 {
		t.Fatalf("after replace: %q, version %d (was %d)", d, v2, v1)
	}
	if must(s.Replace(ctx, "k", []byte("y"), v1, 0)) {
		t.Fatal("replace with a stale version won")
	}

	if err := s.Delete(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "k"); err != nil {
		t.Fatalf("delete of an absent key: %v", err)
	}
	if _, _, found := mustGet("k"); found {
		t.Fatal("deleted key found")
	}
	if must(s.Replace(ctx, "k", []byte("z"), v2, 0)) {
		t.Fatal("replace after delete won")
	}
	if !must(s.Insert(ctx, "k", []byte("d"), 0)) {
		t.Fatal("insert after delete lost")
	}
	if must(s.Replace(ctx, "k", []byte("z"), v2, 0)) {
		t.Fatal("replace with a version from before the delete won")
	}

	// Binary state survives untouched (no JSON transcoding).
	bin := []byte{0, 1, 0xff, '{', 0x80}
	if !must(s.Insert(ctx, "bin", bin, 0)) {
		t.Fatal("insert lost")
	}
	if d, _, _ := mustGet("bin"); !bytes.Equal(d, bin) {
		t.Fatalf("binary state read back as %x", d)
	}
}

// TestExpiry runs on the server's clock: about 2.5 s.
func TestExpiry(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := ctxT(t)

	// Below one second rounds up to one second.
	if ok, err := s.Insert(ctx, "short", []byte("a"), time.Millisecond); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if ok, err := s.Insert(ctx, "k", []byte("a"), time.Second); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if ok, err := s.Insert(ctx, "keep", []byte("a"), time.Second); !ok || err != nil {
		t.Fatal(ok, err)
	}
	_, v, found, err := s.Get(ctx, "k")
	if !found || err != nil {
		t.Fatal(found, err)
	}
	_, vKeep, _, _ := s.Get(ctx, "keep")
	if _, _, found, _ := s.Get(ctx, "short"); !found {
		t.Fatal("1ms ttl expired at once; want it rounded up to 1s")
	}
	// A Replace with ttl 0 clears the expiry.
	if ok, err := s.Replace(ctx, "keep", []byte("b"), vKeep, 0); !ok || err != nil {
		t.Fatal(ok, err)
	}
	time.Sleep(2100 * time.Millisecond)
	for _, k := range []string{"k", "short"} {
		if _, _, found, err := s.Get(ctx, k); found || err != nil {
			t.Fatalf("%s after its ttl: found=%v err=%v", k, found, err)
		}
	}
	if d, _, found, _ := s.Get(ctx, "keep"); !found || string(d) != "b" {
		t.Fatalf("ttl 0 replace still expired: %q %v", d, found)
	}
	if ok, err := s.Replace(ctx, "k", []byte("b"), v, 0); ok || err != nil {
		t.Fatalf("replace of an expired document: ok=%v err=%v", ok, err)
	}
	if ok, err := s.Insert(ctx, "k", []byte("c"), 0); !ok || err != nil {
		t.Fatalf("insert over an expired document: ok=%v err=%v", ok, err)
	}
}

// TestErrorsAreErrors: a failure is never reported as a lost race.
func TestErrorsAreErrors(t *testing.T) {
	s := newStore(t)
	ctx := ctxT(t)
	if ok, err := s.Insert(ctx, "k", []byte("a"), 0); !ok || err != nil {
		t.Fatal(ok, err)
	}
	_, v, _, _ := s.Get(ctx, "k")

	dead, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, _, err := s.Get(dead, "k"); !errors.Is(err, context.Canceled) {
		t.Errorf("Get with a cancelled context: %v", err)
	}
	if ok, err := s.Insert(dead, "k2", []byte("a"), 0); err == nil {
		t.Errorf("Insert with a cancelled context: ok=%v, no error", ok)
	}
	if ok, err := s.Replace(dead, "k", []byte("b"), v, 0); err == nil {
		t.Errorf("Replace with a cancelled context: ok=%v, no error", ok)
	}
	if err := s.Delete(dead, "k"); err == nil {
		t.Error("Delete with a cancelled context: no error")
	}
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	if _, _, _, err := s.Get(expired, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Get past its deadline: %v", err)
	}
	// The value is untouched by all that.
	if d, v2, _, err := s.Get(ctx, "k"); err != nil || string(d) != "a" || v2 != v {
		t.Errorf("after failed calls: %q %d %v", d, v2, err)
	}
	// A document that is not binary (written as JSON by someone else) is an error, not garbage.
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
