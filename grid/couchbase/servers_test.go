package couchbase_test

import (
	"fmt"
	"os"
	"sync"
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

// connect returns the bucket's default collection. The test server's
// cluster is opened once and shared by every test of the package (a
// connection per test made each wait for the bucket anew, which on a loaded
// machine took longer than any fixed wait); another server (a proxy an
// outage test cuts) gets a cluster of its own, closed at cleanup.
func connect(t testing.TB, s server) *gocb.Collection {
	t.Helper()
	if s.connstr != os.Getenv("COUCHBASE_CONNSTR") {
		cluster, b, err := open(s)
		if cluster != nil {
			t.Cleanup(func() { _ = cluster.Close(nil) })
		}
		if err != nil {
			t.Fatal(err)
		}
		return b.DefaultCollection()
	}
	shared.Lock()
	defer shared.Unlock()
	if shared.bucket == nil {
		_, b, err := open(s)
		if err != nil {
			t.Fatal(err)
		}
		shared.bucket = b
	}
	return shared.bucket.DefaultCollection()
}

// shared is the test server's cluster, opened by the first connect.
var shared struct {
	sync.Mutex
	bucket *gocb.Bucket
}

// open connects to s and waits until its bucket serves key-value
// operations. A wait that runs out is tried again with twice the room, up
// to three times (10 s, 20 s, 40 s): a busy machine slows the server's
// start, it does not break it.
func open(s server) (*gocb.Cluster, *gocb.Bucket, error) {
	cluster, err := gocb.Connect(s.connstr, gocb.ClusterOptions{
		Authenticator: gocb.PasswordAuthenticator{Username: s.user, Password: s.password},
	})
	if err != nil {
		return nil, nil, err
	}
	b := cluster.Bucket(s.bucket)
	wait := 10 * time.Second
	for attempt := 1; ; attempt++ {
		err = b.WaitUntilReady(wait, &gocb.WaitUntilReadyOptions{
			ServiceTypes: []gocb.ServiceType{gocb.ServiceTypeKeyValue},
		})
		if err == nil {
			return cluster, b, nil
		}
		if attempt == 3 {
			return cluster, nil, fmt.Errorf("couchbase bucket %q at %s not ready after waiting %v in all: %w", s.bucket, s.connstr, 70*time.Second, err)
		}
		wait *= 2
	}
}

var prefixSeq atomic.Int64

// prefix is a key prefix unique to one test, so tests share the bucket
// without seeing each other's documents.
func prefix() string {
	return fmt.Sprintf("t%d-%d-%d::", os.Getpid(), time.Now().UnixNano()%1e6, prefixSeq.Add(1))
}
