package couchbase_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"testing"
	"time"

	"github.com/couchbase/gocb/v2"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/grid/couchbase"
	"github.com/bucketgrid/bucketgrid/internal/harness/exampletest"
)

// Rate-limit per user with buckets kept in a Couchbase bucket: 10 requests a
// minute, stored only while they matter.
func Example() {
	ctx := context.Background()
	cluster, err := gocb.Connect(os.Getenv("COUCHBASE_CONNSTR"), gocb.ClusterOptions{
		Authenticator: gocb.PasswordAuthenticator{
			Username: os.Getenv("COUCHBASE_USERNAME"),
			Password: os.Getenv("COUCHBASE_PASSWORD"),
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer cluster.Close(nil)
	bucket := cluster.Bucket(os.Getenv("COUCHBASE_BUCKET"))
	if err := bucket.WaitUntilReady(10*time.Second, nil); err != nil {
		log.Fatal(err)
	}

	store, err := couchbase.New(bucket.DefaultCollection(),
		couchbase.WithKeyMapping(func(key string) string { return "ratelimit::" + key }))
	if err != nil {
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
	couchbaseServer(t)
	if got, want := exampletest.Stdout(t, Example), "true true true true true true true true true true false \n"; got != want {
		t.Errorf("Example printed %q, want %q", got, want)
	}
}
