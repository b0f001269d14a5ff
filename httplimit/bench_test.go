package httplimit

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/policy"
)

// BenchmarkMiddleware measures one request through the middleware over
// local buckets, headers included, against a ResponseWriter that discards,
// so that the figure is the middleware's own cost.
//
//	go test -run '^$' -bench Middleware -benchmem ./httplimit
func BenchmarkMiddleware(b *testing.B) {
	one := core.Config{Bandwidths: []core.Bandwidth{core.Greedy(1e12, 1e9, time.Second).WithID("s")}}
	two := core.Config{Bandwidths: []core.Bandwidth{
		core.Greedy(1e12, 1e9, time.Second).WithID("s"), core.Greedy(1e15, 1e9, time.Second).WithID("d")}}
	for _, bc := range []struct {
		name    string
		cfg     core.Config
		clients int
		opts    []Option
	}{
		{"1client/1bandwidth", one, 1, nil},
		{"1client/2bandwidths", two, 1, nil},
		{"100kclients/1bandwidth", one, 100_000, nil},
		{"1client/noheaders", one, 1, []Option{WithHeaders(0)}},
		{"1client/allheaders", one, 1, []Option{WithHeaders(policy.IETFHeaders | policy.XRateLimitHeaders)}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			h := New(NewLocal(StaticPlan(bc.cfg), WithMaxClients(2*bc.clients)), bc.opts...).Handler(ok)
			addrs := make([]string, bc.clients)
			for i := range addrs {
				addrs[i] = netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 1).String()
			}
			r := httptest.NewRequest("GET", "/", nil)
			w := &discard{h: http.Header{}}
			for _, a := range addrs { // every client's bucket exists
				r.RemoteAddr = a
				h.ServeHTTP(w, r)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				r.RemoteAddr = addrs[i]
				if i++; i == len(addrs) {
					i = 0
				}
				w.reset()
				h.ServeHTTP(w, r)
			}
			if w.code != 200 {
				b.Fatalf("status %d", w.code)
			}
		})
	}
}

// BenchmarkNoMiddleware is the floor: the same loop without the middleware.
func BenchmarkNoMiddleware(b *testing.B) {
	r := httptest.NewRequest("GET", "/", nil)
	w := &discard{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		w.reset()
		ok.ServeHTTP(w, r)
	}
}
