package mongo_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	mongodrv "go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/bucketgrid/bucketgrid/internal/harness/storetest"
)

// startHint says how to get a server when MONGODB_URI is unset.
const startHint = "start the test servers with: scripts/servers.sh start && . .servers/env " +
	"(or point MONGODB_URI at any MongoDB)"

// mongoURI returns MONGODB_URI. Unset, the test skips, except under CI where
// a backend test that cannot reach its server must fail.
func mongoURI(t testing.TB) string {
	t.Helper()
	return storetest.Server(t, "MONGODB_URI", "the MongoDB backend tests need a server", startHint)
}

// mongoPGURI returns MONGODB_PG_URI: the FerretDB that scripts/servers.sh
// runs on PostgreSQL (its PostgreSQL handler). Unset, the test skips,
// except under CI.
func mongoPGURI(t testing.TB) string {
	t.Helper()
	uri := os.Getenv("MONGODB_PG_URI")
	if uri == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("MONGODB_PG_URI is not set and CI is: the MongoDB backend's PostgreSQL run needs FerretDB on PostgreSQL; " + startHint)
		}
		t.Skip("MONGODB_PG_URI is not set; " + startHint)
	}
	return uri
}

// servers are the MongoDB servers the tests run on: MONGODB_URI, and
// MONGODB_PG_URI when scripts/servers.sh started FerretDB on PostgreSQL.
func servers(t testing.TB) map[string]string {
	t.Helper()
	return map[string]string{"sqlite": mongoURI(t), "postgresql": mongoPGURI(t)}
}

// connect opens a client with at most pool connections, closed at cleanup.
func connect(t testing.TB, uri string, pool uint64) *mongodrv.Client {
	t.Helper()
	c, err := mongodrv.Connect(options.Client().ApplyURI(uri).
		SetMaxPoolSize(pool).
		SetServerSelectionTimeout(5 * time.Second).
		SetConnectTimeout(2 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Disconnect(ctx)
	})
	return c
}

var collSeq atomic.Int64

// collection returns a fresh collection for one test, dropped at cleanup.
func collection(t testing.TB, c *mongodrv.Client) *mongodrv.Collection {
	t.Helper()
	name := strings.NewReplacer("/", "_", " ", "_", "#", "_").Replace(t.Name())
	if len(name) > 40 {
		name = name[:40]
	}
	name = fmt.Sprintf("%s_%d_%d", name, os.Getpid(), collSeq.Add(1))
	coll := c.Database("bucketgrid_test").Collection(name)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = coll.Drop(ctx)
	})
	return coll
}
