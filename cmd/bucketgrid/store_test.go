package main

import (
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

func TestParseStoreURI(t *testing.T) {
	u, err := parseStoreURI("mongodb://us%40er:p%3Ass@h1:27017,h2:27018/db?maxPoolSize=1&collection=c")
	if err != nil {
		t.Fatal(err)
	}
	if u.scheme != "mongodb" || u.user != "us@er" || u.password != "p:ss" || u.hosts != "h1:27017,h2:27018" ||
		u.path != "db" || u.query.Get("collection") != "c" || u.query.Get("maxPoolSize") != "1" {
		t.Fatalf("%+v", u)
	}
	u.query.Del("collection")
	if got := u.driverURI(u.path); got != "mongodb://us%40er:p%3Ass@h1:27017,h2:27018/db?maxPoolSize=1" {
		t.Fatalf("driver URI %q", got)
	}
	for _, bad := range []string{"nothing", "://x", "couchbase://", "mongodb://h/?a=%zz"} {
		if _, err := parseStoreURI(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// storeConfig: a limit no window or refill changes during the test.
const storeConfig = `
domain: store
descriptors:
  - key: fixed
    rate_limit: {unit: year, requests_per_unit: 40}
  - key: bucket
    rate_limit: {unit: year, requests_per_unit: 40, algorithm: token_bucket}
`

// testSharedStore runs instances on one store: 120 requests spread over
// them admit exactly the limit, for both algorithms.
func testSharedStore(t *testing.T, uri string, instances int) {
	dir := writeConfig(t, t.TempDir(), map[string]string{"store.yaml": storeConfig})
	var clients []rlspb.RateLimitServiceClient
	for range instances {
		in := startInstance(t, "-config", dir, "-grpc-addr", "127.0.0.1:0", "-http-addr", "", "-backend", uri, "-timeout", "10s")
		clients = append(clients, client(t, in.grpcAddr))
	}
	for _, key := range []string{"fixed", "bucket"} {
		admitted, failed := hammerDomain(t, clients, 120, "store", key, "v"+randHex(4))
		if failed > 0 || admitted != 40 {
			t.Fatalf("%s: %d admitted, %d failed of 120; want exactly 40 admitted", key, admitted, failed)
		}
	}
}

func TestRedisBackend(t *testing.T) {
	testSharedStore(t, fmt.Sprintf("redis://%s/0?prefix=bgtest:%s:", need(t, "REDIS_ADDR"), randHex(4)), 2)
}

func TestMongoBackend(t *testing.T) {
	base := strings.TrimRight(need(t, "MONGODB_URI"), "/")
	if i := strings.Index(base, "?"); i >= 0 {
		base = base[:i]
	}
	// FerretDB v1, the test server, compares and swaps atomically only
	// through one connection (see grid/mongo): one instance with one
	// connection here; on a real MongoDB any number of instances share it
	testSharedStore(t, fmt.Sprintf("%s/bucketgrid_test?maxPoolSize=1&collection=rls_%d_%s", base, os.Getpid(), randHex(3)), 1)
}

func TestCouchbaseBackend(t *testing.T) {
	connstr := need(t, "COUCHBASE_CONNSTR")
	scheme, hosts, _ := strings.Cut(connstr, "://")
	uri := fmt.Sprintf("%s://%s:%s@%s/%s", scheme, url.PathEscape(os.Getenv("COUCHBASE_USERNAME")),
		url.PathEscape(os.Getenv("COUCHBASE_PASSWORD")), hosts, os.Getenv("COUCHBASE_BUCKET"))
	testSharedStore(t, uri, 2)
}
