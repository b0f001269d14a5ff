package mongo_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"testing"
	"time"

	mongodrv "go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/grid/mongo"
	"github.com/bucketgrid/bucketgrid/internal/harness/exampletest"
)

// Rate-limit per user with buckets kept in a MongoDB collection: 10 requests
// a minute, stored only while they matter.
func Example() {
	ctx := context.Background()
	// On FerretDB add .SetMaxPoolSize(1): see the package documentation.
	client, err := mongodrv.Connect(options.Client().ApplyURI(os.Getenv("MONGODB_URI")))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Disconnect(ctx)

	store, err := mongo.New(client.Database("example").Collection("buckets"))
	if err != nil {
		log.Fatal(err)
	}
	if err := store.EnsureIndexes(ctx); err != nil {
		log.Fatal(err)
	}
	buckets := bucketgrid.NewManager(cas.New(store),
		bucketgrid.WithExpiration(bucketgrid.ExpireAfterRefill(time.Minute)))
	limit, err := core.NewConfig(core.Greedy(10, 10, time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	perUser := func(context.Context) (core.Config, error) { return limit, nil }

	user := buckets.Bucket("user:42", perUser)
	for range 11 {
		ok, err := user.TryConsume(ctx, 1)
		if err != nil {
			log.Fatal(err) // the store failed: fail open or closed, as you choose
		}
		fmt.Print(ok, " ")
	}
	fmt.Println()
	if err := buckets.RemoveBucket(ctx, "user:42"); err != nil {
		log.Fatal(err)
	}
	// Output when run:
	// true true true true true true true true true true false
}

// TestExample runs Example against the test server and checks what it
// prints; an Example needs a server, so it carries no checked Output itself.
func TestExample(t *testing.T) {
	mongoURI(t)
	if got, want := exampletest.Stdout(t, Example), "true true true true true true true true true true false \n"; got != want {
		t.Errorf("Example printed %q, want %q", got, want)
	}
}
