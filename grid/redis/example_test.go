package redis_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/grid/redis"
	"github.com/bucketgrid/bucketgrid/internal/harness/exampletest"
)

// Rate-limit per user with buckets kept in Redis: 10 requests a minute,
// stored only while they matter. Each check is one script call on the
// bucket's last known version; concurrent checks share pipelines.
func Example() {
	ctx := context.Background()
	client := goredis.NewClient(&goredis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer client.Close()

	store := redis.New(client, redis.WithPrefix("example:buckets:"))
	if err := store.Load(ctx); err != nil { // loads the script, checks the connection
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
	redisAddr(t)
	if got, want := exampletest.Stdout(t, Example), "true true true true true true true true true true false \n"; got != want {
		t.Errorf("Example printed %q, want %q", got, want)
	}
}
