package mongo_test

import (
	"errors"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/grid/mongo"
	"github.com/bucketgrid/bucketgrid/internal/harness/storetest"
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

// TestExpiryRounding: the store computes expiry on its own clock
// (WithClock) and keeps it in a BSON date, of millisecond precision: a TTL
// rounds up to the next millisecond, never down, so nothing expires early —
// a microsecond TTL too. What a TTL means otherwise (ttl 0, every write
// restarting it, an expired key absent to Replace and Insert) is tck's.
func TestExpiryRounding(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	s := newStore(t, 1, mongo.WithClock(clk))
	ctx := storetest.Context(t)
	for _, tc := range []struct {
		key string
		ttl time.Duration
	}{{"minute", time.Minute}, {"micro", time.Microsecond}} {
		if ok, err := s.Insert(ctx, tc.key, []byte("a"), tc.ttl); !ok || err != nil {
			t.Fatal(ok, err)
		}
	}
	if _, _, found, _ := s.Get(ctx, "micro"); !found {
		t.Fatal("1µs ttl read as expired at once")
	}
	clk.Advance(time.Millisecond)
	if _, _, found, _ := s.Get(ctx, "micro"); found {
		t.Fatal("1µs ttl alive after 1ms")
	}
	clk.Advance(time.Minute - 2*time.Millisecond)
	if _, _, found, _ := s.Get(ctx, "minute"); !found {
		t.Fatal("a one-minute ttl expired a millisecond early")
	}
	clk.Advance(2 * time.Millisecond)
	if _, _, found, err := s.Get(ctx, "minute"); found || err != nil {
		t.Fatalf("a one-minute ttl a millisecond after it ran out: found=%v err=%v", found, err)
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
	ctx := storetest.Context(t)
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
	ctx := storetest.Context(t)
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

// TestForeignDocumentIsCorrupt: a state field of the wrong type is a
// corrupt record, never garbage state nor an outage. The store contract
// itself, errors included, is tck's (TestTCK).
func TestForeignDocumentIsCorrupt(t *testing.T) {
	ctx := storetest.Context(t)
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
