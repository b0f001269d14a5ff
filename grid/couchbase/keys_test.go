package couchbase_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/couchbase/gocb/v2"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/grid/couchbase"
	"github.com/bucketgrid/bucketgrid/httplimit"
	"github.com/bucketgrid/bucketgrid/internal/harness/keyrule"
	"github.com/bucketgrid/bucketgrid/internal/harness/storetest"
)

// prefix45 returns a key prefix of 45 bytes unique to this call: an API
// key behind a 45-byte prefix.
func prefix45() string {
	p := prefix()
	return p + strings.Repeat("_", 45-len(p))
}

// TestKeyRuleThroughMiddleware: an API key whose document id is one byte
// over 250 (45-byte prefix, "X-Api-Key:", 196 bytes) is answered 400 and
// costs the store nothing, where it used to be served 20 times of 20 under
// a 2-per-hour limit; one byte less is limited exactly; with WithFitKeys
// the long key is limited exactly too.
func TestKeyRuleThroughMiddleware(t *testing.T) {
	coll := connect(t, couchbaseServer(t))
	p := prefix45()
	s, err := couchbase.New(coll, couchbase.WithKeyMapping(func(k string) string { return p + k }))
	if err != nil {
		t.Fatal(err)
	}
	apiKey := httplimit.HeaderKey(keyrule.Header, nil)
	over := strings.Repeat("k", couchbase.MaxKeyLen-len(p)-len("X-Key:")+1)
	edge := over[1:]

	res := keyrule.Through(s, apiKey, over, 20)
	if want := slices.Repeat([]int{400}, 20); !slices.Equal(res.Statuses, want) || res.Calls != 0 || res.Stats.FailedOpen != 0 {
		t.Errorf("id of %d bytes: statuses %v, %d store calls, stats %+v; want 400 each and no store call",
			len(p)+len("X-Key:")+len(over), res.Statuses, res.Calls, res.Stats)
	}
	res = keyrule.Through(s, apiKey, edge, 4)
	if !slices.Equal(res.Statuses, []int{200, 200, 429, 429}) {
		t.Errorf("id of %d bytes: statuses %v, want 200 200 429 429", len(p)+len("X-Key:")+len(edge), res.Statuses)
	}
	res = keyrule.Through(s, apiKey, over, 4, bucketgrid.WithFitKeys(couchbase.MaxKeyLen-len(p)))
	if !slices.Equal(res.Statuses, []int{200, 200, 429, 429}) {
		t.Errorf("WithFitKeys: statuses %v, want 200 200 429 429", res.Statuses)
	}
}

// TestKeyRule: every method refuses a key whose id breaks the rule with a
// *core.KeyError that does not show the key, and sends nothing: on a closed
// cluster, where any I/O would fail otherwise, the answer is still the key
// error.
func TestKeyRule(t *testing.T) {
	srv := couchbaseServer(t)
	cluster, err := gocb.Connect(srv.connstr, gocb.ClusterOptions{
		Authenticator: gocb.PasswordAuthenticator{Username: srv.user, Password: srv.password},
	})
	if err != nil {
		t.Fatal(err)
	}
	coll := cluster.Bucket(srv.bucket).DefaultCollection()
	p := prefix()
	s, err := couchbase.New(coll, couchbase.WithKeyMapping(func(k string) string { return p + k }))
	if err != nil {
		t.Fatal(err)
	}
	if err := cluster.Close(nil); err != nil {
		t.Fatal(err)
	}
	ctx := storetest.Context(t)
	bad := map[string]string{
		"one byte over":            strings.Repeat("x", couchbase.MaxKeyLen-len(p)+1),
		"not UTF-8":                "caf\xe9",
		"far too long":             strings.Repeat("x", 100_000),
		"broken rune at the limit": strings.Repeat("x", couchbase.MaxKeyLen-len(p)-1) + "\xe2\x82",
	}
	for name, key := range bad {
		if err := keyrule.Refused(ctx, s, key); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	// a key within the rule does try the closed cluster
	if _, _, _, err := s.Get(ctx, strings.Repeat("y", couchbase.MaxKeyLen-len(p))); err == nil || errors.Is(err, core.ErrInvalidKey) {
		t.Fatalf("a 250-byte id on a closed cluster: %v, want a cluster error", err)
	}
	if err := s.CheckKey(strings.Repeat("y", couchbase.MaxKeyLen-len(p))); err != nil {
		t.Fatalf("a 250-byte id: %v", err)
	}
	empty, err := couchbase.New(coll)
	if err != nil {
		t.Fatal(err)
	}
	if err := empty.CheckKey(""); !errors.Is(err, core.ErrInvalidKey) {
		t.Errorf("empty id: %v, want ErrInvalidKey", err)
	}
	if _, err := couchbase.New(coll, couchbase.WithKeyMapping(nil)); err == nil {
		t.Error("nil key mapping accepted")
	}
	if _, err := couchbase.New(nil); err == nil {
		t.Error("nil collection accepted")
	}
}
