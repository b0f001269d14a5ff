package mongo_test

import (
	"context"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	mongodrv "go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/bucketgrid/bucketgrid/grid/mongo"
	"github.com/bucketgrid/bucketgrid/tck"
)

// isFerretDB reports whether the server behind c is FerretDB (its buildInfo
// carries ferretdbVersion).
func isFerretDB(t testing.TB, c *mongodrv.Client) bool {
	t.Helper()
	var info bson.M
	err := c.Database("admin").RunCommand(context.Background(), bson.D{{Key: "buildInfo", Value: 1}}).Decode(&info)
	if err != nil {
		t.Fatalf("buildInfo: %v", err)
	}
	_, ok := info["ferretdbVersion"]
	return ok
}

// TestProbeDetectsFerretDBLostUpdates is evidence that the TCK's atomicity
// probe catches a real, third-party non-atomic server: FerretDB v1 evaluates
// a ReplaceOne filter and then writes by _id alone, on its SQLite handler
// and on its PostgreSQL handler alike, so through several
// connections concurrent compare-and-swaps both "win" and increments are
// lost. Through one connection the probe loses nothing (a smaller run: one
// connection serialises it, and the TCK repeats it). Against a real MongoDB
// both runs must lose nothing.
func TestProbeDetectsFerretDBLostUpdates(t *testing.T) {
	for name, uri := range servers(t) {
		t.Run(name, func(t *testing.T) { probeLostUpdates(t, uri) })
	}
}

func probeLostUpdates(t *testing.T, uri string) {
	const workers, each = 4, 250
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	pooled := connect(t, uri, 8)
	ferret := isFerretDB(t, pooled)
	s, err := mongo.New(collection(t, pooled))
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	r, err := tck.AtomicityProbe(ctx, s, "hot", workers, each)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("pool of 8 connections: %d of %d increments kept, %d lost (FerretDB: %v) in %v",
		r.Got, r.Want, r.Lost(), ferret, time.Since(began).Round(time.Millisecond))
	switch {
	case ferret && r.Lost() <= 0:
		t.Errorf("the probe found no lost update on FerretDB through 8 connections (%d/%d): "+
			"either FerretDB became atomic or the probe lost its teeth", r.Got, r.Want)
	case !ferret && r.Lost() != 0:
		t.Errorf("lost %d of %d increments on a server that is not FerretDB: its filtered ReplaceOne is not atomic", r.Lost(), r.Want)
	}

	single := newStoreURI(t, uri, 1)
	began = time.Now()
	r, err = tck.AtomicityProbe(ctx, single, "hot", workers, 100)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("one connection: %d of %d increments kept in %v", r.Got, r.Want, time.Since(began).Round(time.Millisecond))
	if r.Lost() != 0 {
		t.Errorf("lost %d of %d increments through one connection", r.Lost(), r.Want)
	}
}
