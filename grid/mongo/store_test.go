package mongo_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/grid/mongo"
)

func newStore(t testing.TB, pool uint64, opts ...mongo.Option) *mongo.Store {
	t.Helper()
	c := connect(t, mongoURI(t), pool)
	s, err := mongo.New(collection(t, c), opts...)
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
	clk := clock.NewFake(time.Now())
	s := newStore(t, 1, mongo.WithClock(clk))
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
	// Re-created: the version a client read before the delete must not match.
	if !must(s.Insert(ctx, "k", []byte("d"), 0)) {
		t.Fatal("insert after delete lost")
	}
	if must(s.Replace(ctx, "k", []byte("z"), v2, 0)) {
		t.Fatal("replace with a version from before the delete won")
	}

	// Empty state is a value like any other.
	if !must(s.Insert(ctx, "empty", nil, 0)) {
		t.Fatal("insert of empty state lost")
	}
	if d, _, found := mustGet("empty"); !found || len(d) != 0 {
		t.Fatalf("empty state read back as %q, %v", d, found)
	}
}

func TestExpiry(t *testing.T) {
	clk := clock.NewFake(time.Now())
	s := newStore(t, 1, mongo.WithClock(clk))
	ctx := ctxT(t)

	if ok, err := s.Insert(ctx, "k", []byte("a"), time.Minute); !ok || err != nil {
		t.Fatal(ok, err)
	}
	_, v, found, err := s.Get(ctx, "k")
	if !found || err != nil {
		t.Fatal(found, err)
	}
	// BSON dates have millisecond precision; expiry rounds up, never early.
	clk.Advance(time.Minute - time.Millisecond)
	if _, _, found, _ := s.Get(ctx, "k"); !found {
		t.Fatal("expired early")
	}
	clk.Advance(2 * time.Millisecond)
	if _, _, found, err := s.Get(ctx, "k"); found || err != nil {
		t.Fatalf("expired document: found=%v err=%v", found, err)
	}
	if ok, err := s.Replace(ctx, "k", []byte("b"), v, 0); ok || err != nil {
		t.Fatalf("replace of an expired document: ok=%v err=%v", ok, err)
	}
	// Insert takes the expired document over, once.
	if ok, err := s.Insert(ctx, "k", []byte("c"), time.Minute); !ok || err != nil {
		t.Fatalf("insert over an expired document: ok=%v err=%v", ok, err)
	}
	if ok, err := s.Insert(ctx, "k", []byte("d"), time.Minute); ok || err != nil {
		t.Fatalf("second insert over the expired document: ok=%v err=%v", ok, err)
	}
	d, v, found, err := s.Get(ctx, "k")
	if !found || err != nil || string(d) != "c" {
		t.Fatalf("get = %q %v %v", d, found, err)
	}
	// A Replace with ttl 0 clears the expiry.
	if ok, err := s.Replace(ctx, "k", []byte("e"), v, 0); !ok || err != nil {
		t.Fatal(ok, err)
	}
	clk.Advance(time.Hour)
	if d, _, found, _ := s.Get(ctx, "k"); !found || string(d) != "e" {
		t.Fatalf("ttl 0 replace still expires: %q %v", d, found)
	}
	// Every write sets the TTL anew.
	_, v, _, _ = s.Get(ctx, "k")
	if ok, err := s.Replace(ctx, "k", []byte("f"), v, time.Second); !ok || err != nil {
		t.Fatal(ok, err)
	}
	clk.Advance(time.Second + time.Millisecond)
	if _, _, found, _ := s.Get(ctx, "k"); found {
		t.Fatal("replace with ttl did not expire")
	}
}

func TestSubMillisecondTTL(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	s := newStore(t, 1, mongo.WithClock(clk))
	ctx := ctxT(t)
	if ok, err := s.Insert(ctx, "k", []byte("a"), time.Microsecond); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if _, _, found, _ := s.Get(ctx, "k"); !found {
		t.Fatal("1µs ttl read as expired at once")
	}
	clk.Advance(time.Millisecond)
	if _, _, found, _ := s.Get(ctx, "k"); found {
		t.Fatal("1µs ttl alive after 1ms")
	}
}

func TestEnsureIndexesAndRemoveExpired(t *testing.T) {
	clk := clock.NewFake(time.Now())
	c := connect(t, mongoURI(t), 1)
	coll := collection(t, c)
	s, err := mongo.New(coll, mongo.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	// Twice: idempotent, and NotImplemented (FerretDB) is no error.
	for range 2 {
		if err := s.EnsureIndexes(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for i, ttl := range []time.Duration{time.Second, time.Second, time.Second, time.Hour, 0} {
		if ok, err := s.Insert(ctx, string(rune('a'+i)), []byte("x"), ttl); !ok || err != nil {
			t.Fatal(ok, err)
		}
	}
	clk.Advance(2 * time.Second)
	n, err := s.RemoveExpired(ctx, 2)
	if err != nil || n != 2 {
		t.Fatalf("RemoveExpired(2) = %d, %v; want 2", n, err)
	}
	n, err = s.RemoveExpired(ctx, 0)
	if err != nil || n != 1 {
		t.Fatalf("RemoveExpired(0) = %d, %v; want 1", n, err)
	}
	left, err := coll.CountDocuments(ctx, bson.D{})
	if err != nil || left != 2 {
		t.Fatalf("%d documents left, %v; want 2", left, err)
	}
}

func TestOptions(t *testing.T) {
	c := connect(t, mongoURI(t), 1)
	coll := collection(t, c)
	ctx := ctxT(t)
	s, err := mongo.New(coll,
		mongo.WithFieldNames("s", "v", "exp"),
		mongo.WithKeyMapping(func(key string) any { return bson.D{{Key: "tenant", Value: "t1"}, {Key: "key", Value: key}} }))
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := s.Insert(ctx, "k", []byte("a"), time.Hour); !ok || err != nil {
		t.Fatal(ok, err)
	}
	_, v, found, err := s.Get(ctx, "k")
	if !found || err != nil {
		t.Fatal(found, err)
	}
	if ok, err := s.Replace(ctx, "k", []byte("b"), v, time.Hour); !ok || err != nil {
		t.Fatal(ok, err)
	}
	var doc bson.M
	if err := coll.FindOne(ctx, bson.D{}).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	_, v2, _, _ := s.Get(ctx, "k")
	id, _ := doc["_id"].(bson.D)
	if len(id) != 2 || id[1].Value != "k" || doc["s"] == nil || doc["v"] != int64(v2) || v2 == v || doc["exp"] == nil {
		t.Fatalf("document = %v", doc)
	}
	// A batch finds documents by the mapped _id too.
	ops := []*cas.Op{{Kind: cas.OpGet, Key: "k"}, {Kind: cas.OpReplace, Key: "k2", Data: []byte("c"), Ver: 1}}
	if err := s.Batching().Batch(ctx, ops); err != nil || ops[0].Result.Err != nil || !ops[0].Result.Found ||
		string(ops[0].Result.Data) != "b" || ops[0].Result.Ver != v2 || ops[1].Result.Err != nil || ops[1].Result.Written {
		t.Fatalf("batch through the key mapping: %v; results %+v %+v", err, ops[0].Result, ops[1].Result)
	}

	for _, o := range []mongo.Option{
		mongo.WithFieldNames("", "v", "e"),
		mongo.WithFieldNames("a", "a", "e"),
		mongo.WithFieldNames("_id", "v", "e"),
		mongo.WithFieldNames("$s", "v", "e"),
		mongo.WithKeyMapping(nil),
		mongo.WithClock(nil),
		mongo.WithClock(clock.Monotonic()),
	} {
		if _, err := mongo.New(coll, o); err == nil {
			t.Error("invalid option accepted")
		}
	}
	if _, err := mongo.New(nil); err == nil {
		t.Error("nil collection accepted")
	}
}

// TestErrorsAreErrors: a failure is never reported as a lost race.
func TestErrorsAreErrors(t *testing.T) {
	s := newStore(t, 1)
	ctx := ctxT(t)
	if ok, err := s.Insert(ctx, "k", []byte("a"), 0); !ok || err != nil {
		t.Fatal(ok, err)
	}
	_, v, _, _ := s.Get(ctx, "k")

	dead, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, _, err := s.Get(dead, "k"); err == nil {
		t.Error("Get with a cancelled context: no error")
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
	if !errors.Is(func() error { _, _, _, err := s.Get(dead, "k"); return err }(), context.Canceled) {
		t.Error("Get error does not wrap context.Canceled")
	}
	// A state field of the wrong type is an error, not garbage.
	c := connect(t, mongoURI(t), 1)
	coll := collection(t, c)
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "bad"}, {Key: "state", Value: "text"}, {Key: "version", Value: int64(1)}}); err != nil {
		t.Fatal(err)
	}
	s2, _ := mongo.New(coll)
	if _, _, _, err := s2.Get(ctx, "bad"); err == nil {
		t.Error("non-binary state read without error")
	} else if !errors.Is(err, core.ErrCorruptState) {
		t.Errorf("non-binary state: %v, want an error wrapping core.ErrCorruptState (a corrupt record, never an outage)", err)
	}
}

func newStoreURI(t testing.TB, uri string, pool uint64, opts ...mongo.Option) *mongo.Store {
	t.Helper()
	s, err := mongo.New(collection(t, connect(t, uri, pool)), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
