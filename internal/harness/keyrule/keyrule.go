// Package keyrule drives a client's key through the whole request path —
// httplimit, a Manager, the cas executor — to a store with a key rule, and
// counts what reaches the store. The backends' tests use it to show that a
// key one byte over their rule is answered 400 and costs the store nothing.
package keyrule

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/httplimit"
	"github.com/bucketgrid/bucketgrid/internal/harness/storetest"
)

// Header is the request header Through puts the value in.
const Header = "X-Key"

// Raw keys a request by the Header value exactly as sent, so that a test
// reaches the store's rule rather than httplimit.HeaderKey's length limit.
func Raw(r *http.Request) (string, error) { return r.Header.Get(Header), nil }

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
	c := &storetest.Counting{Store: store}
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

// Refused returns nil when CheckKey and every method of store refuse key
// with a *core.KeyError whose text does not show the key, and otherwise an
// error naming the first call that did not. Counting I/O is the caller's
// business (a driver's command monitor, say).
func Refused(ctx context.Context, store cas.Store, key string) error {
	kc, ok := store.(cas.KeyChecker)
	if !ok {
		return errors.New("the store does not implement cas.KeyChecker")
	}
	_, _, _, getErr := store.Get(ctx, key)
	_, insErr := store.Insert(ctx, key, []byte("a"), 0)
	_, repErr := store.Replace(ctx, key, []byte("a"), 1, 0)
	calls := []struct {
		name string
		err  error
	}{{"CheckKey", kc.CheckKey(key)}, {"Get", getErr}, {"Insert", insErr}, {"Replace", repErr},
		{"Delete", store.Delete(ctx, key)}}
	for _, c := range calls {
		var ke *core.KeyError
		if !errors.As(c.err, &ke) || !errors.Is(c.err, core.ErrInvalidKey) {
			return fmt.Errorf("%s of a key of %d bytes: %v, want a *core.KeyError", c.name, len(key), c.err)
		}
		if shown := key[:min(len(key), 12)]; len(shown) >= 8 && strings.Contains(c.err.Error(), shown) {
			return fmt.Errorf("%s: %q shows the key", c.name, c.err)
		}
	}
	return nil
}
