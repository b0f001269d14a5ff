package couchbase_test

import (
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/couchbase/gocb/v2"

	"github.com/bucketgrid/bucketgrid/internal/harness/storetest"
)

const startHint = "start the test servers with: scripts/servers.sh start && . .servers/env " +
	"(or point COUCHBASE_CONNSTR, COUCHBASE_USERNAME, COUCHBASE_PASSWORD and COUCHBASE_BUCKET at any Couchbase Server)"

type server struct {
	connstr, user, password, bucket string
}

// couchbaseServer reads COUCHBASE_*. With COUCHBASE_CONNSTR unset the test
// skips, except under CI where a backend test that cannot reach its server
// must fail.
func couchbaseServer(t testing.TB) server {
	t.Helper()
	s := server{
		connstr:  storetest.Server(t, "COUCHBASE_CONNSTR", "the Couchbase backend tests need a server", startHint),
		user:     envOr("COUCHBASE_USERNAME", "Administrator"),
		password: envOr("COUCHBASE_PASSWORD", "password"),
		bucket:   envOr("COUCHBASE_BUCKET", "default"),
	}
	return s
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// connect opens the cluster and returns the bucket's default collection,
// closed at cleanup.
func connect(t testing.TB, s server) *gocb.Collection {
	t.Helper()
	cluster, err := gocb.Connect(s.connstr, gocb.ClusterOptions{
		Authenticator: gocb.PasswordAuthenticator{Username: s.user, Password: s.password},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.Close(nil) })
	b := cluster.Bucket(s.bucket)
	if err := b.WaitUntilReady(10*time.Second, &gocb.WaitUntilReadyOptions{
		ServiceTypes: []gocb.ServiceType{gocb.ServiceTypeKeyValue},
	}); err != nil {
		t.Fatalf("couchbase bucket %q at %s not ready: %v", s.bucket, s.connstr, err)
	}
	return b.DefaultCollection()
}

var prefixSeq atomic.Int64

// prefix is a key prefix unique to one test, so tests share the bucket
// without seeing each other's documents.
func prefix() string {
	return fmt.Sprintf("t%d-%d-%d::", os.Getpid(), time.Now().UnixNano()%1e6, prefixSeq.Add(1))
}
