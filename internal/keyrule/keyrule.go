// Package keyrule drives a client's key through the whole request path —
// httplimit, a Manager, the cas executor — to a store with a key rule, and
// counts what reaches the store. The backends' tests use it to show that a
// key one byte over their rule is answered 400 and costs the store nothing.
package keyrule

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/httplimit"
)

// Header is the request header Through puts the value in.
const Header = "X-Key"

// Raw keys a request by the Header value exactly as sent, so that a test
// reaches the store's rule rather than httplimit.HeaderKey's length limit.
func Raw(r *http.Request) (string, error) { return r.Header.Get(Header), nil }

// Counting is a cas.Store that counts the calls reaching its Store and
// forwards CheckKey, as a decorator must for the executor to see the rule.
type Counting struct {
	cas.Store
	calls atomic.Int64
}

// Calls returns the calls that reached the store so far.
func (c *Counting) Calls() int64 { return c.calls.Load() }

// CheckKey forwards to the store's KeyChecker; nil without one.
func (c *Counting) CheckKey(key string) error {
	if kc, ok := c.Store.(cas.KeyChecker); ok {
		return kc.CheckKey(key)
	}
	return nil
}

// Get counts and forwards.
func (c *Counting) Get(ctx context.Context, k string) ([]byte, cas.Version, bool, error) {
	c.calls.Add(1)
	return c.Store.Get(ctx, k)
}

// Insert counts and forwards.
func (c *Counting) Insert(ctx context.Context, k string, d []byte, ttl time.Duration) (bool, error) {
	c.calls.Add(1)
	return c.Store.Insert(ctx, k, d, ttl)
}

// Replace counts and forwards.
func (c *Counting) Replace(ctx context.Context, k string, d []byte, v cas.Version, ttl time.Duration) (bool, error) {
	c.calls.Add(1)
	return c.Store.Replace(ctx, k, d, v, ttl)
}

// Delete counts and forwards.
func (c *Counting) Delete(ctx context.Context, k string) error {
	c.calls.Add(1)
	return c.Store.Delete(ctx, k)
}

// Result is what Through saw.
type Result struct {
	Statuses []int           // one per request
	Calls    int64           // calls that reached the store
	Stats    httplimit.Stats // the middleware's counters
}

// Limit is the plan of Through's buckets: 2 requests an hour.
var Limit = core.Config{Bandwidths: []core.Bandwidth{core.Intervally(2, 2, time.Hour)}}

// Through sends n requests carrying value in Header, keyed by key, through
// httplimit.New (fail-open, timeout 10 s) over NewManaged over a Manager
// (with mopts) over a cas executor over store, counted.
func Through(store cas.Store, key httplimit.KeyFunc, value string, n int, mopts ...bucketgrid.ManagerOption) Result {
	c := &Counting{Store: store}
	m := bucketgrid.NewManager(cas.New(c), mopts...)
	mw := httplimit.New(httplimit.NewManaged(m, httplimit.StaticPlan(Limit)),
		httplimit.WithKey(key), httplimit.WithFailOpen(true), httplimit.WithTimeout(10*time.Second))
	h := mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	var res Result
	for range n {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header[Header] = []string{value}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		res.Statuses = append(res.Statuses, w.Code)
	}
	res.Calls = c.Calls()
	res.Stats = mw.Stats()
	return res
}
