package httplimit

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/core"
)

// discard is a ResponseWriter that keeps only the status, so that a tight
// loop measures the middleware rather than httptest.ResponseRecorder.
type discard struct {
	h    http.Header
	code int
}

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(code int)        { d.code = code }
func (d *discard) reset() {
	clear(d.h)
	d.code = 0
}

// One million distinct clients through the middleware: the map of buckets
// never holds more than its bound, and every new client still gets a full
// bucket of its own.
func TestBoundedMemoryMillionClients(t *testing.T) {
	const bound = 10_000
	clients := 1_000_000
	if raceEnabled {
		clients = 200_000 // the race detector makes each request ~10× slower
	}
	clock := clock.NewFake(t0)
	src := NewLocal(StaticPlan(config(t, core.Intervally(10, 10, time.Minute))),
		WithClock(clock), WithMaxClients(bound), WithIdleTimeout(2*time.Minute))
	mw := New(src)
	h := mw.Handler(ok)
	r := httptest.NewRequest("GET", "/", nil)
	w := &discard{h: http.Header{}}
	base := netip.MustParseAddr("10.0.0.0").As4()
	start := time.Now()
	maxLen := 0
	for i := range clients {
		a := base
		a[1], a[2], a[3] = byte(i>>16), byte(i>>8), byte(i)
		r.RemoteAddr = netip.AddrPortFrom(netip.AddrFrom4(a), 443).String()
		w.reset()
		h.ServeHTTP(w, r)
		if w.code != 200 || w.h["Ratelimit"][0] != `"default";r=9;t=60` {
			t.Fatalf("client %d: status %d, RateLimit %q: not a fresh bucket of its own", i, w.code, w.h["Ratelimit"])
		}
		if i%1000 == 0 {
			maxLen = max(maxLen, src.Map().Len())
			clock.Advance(time.Millisecond)
		}
	}
	maxLen = max(maxLen, src.Map().Len())
	elapsed := time.Since(start)
	t.Logf("%d clients in %v (%v per request); largest map %d entries, bound %d",
		clients, elapsed, elapsed/time.Duration(clients), maxLen, bound)
	if maxLen > bound {
		t.Fatalf("map held %d buckets, bound %d", maxLen, bound)
	}
	if s := mw.Stats(); s.Allowed != uint64(clients) {
		t.Fatalf("stats %+v", s)
	}
	// idle buckets can all go
	clock.Advance(3 * time.Minute)
	if n := src.Map().Sweep(); n == 0 || src.Map().Len() != 0 {
		t.Errorf("sweep dropped %d, %d left", n, src.Map().Len())
	}
}
