package httplimit

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid"
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
	const clients, bound = 1_000_000, 10_000
	clock := bucketgrid.NewFakeClock(t0)
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
		if w.code != 200 {
			t.Fatalf("client %d: status %d", i, w.code)
		}
		if i%1000 == 0 {
			maxLen = max(maxLen, src.Map().Len())
			clock.Advance(time.Millisecond)
		}
	}
	maxLen = max(maxLen, src.Map().Len())
	elapsed := time.Since(start)
	t.Logf("%d clients in %v (%v per request); largest map %d entries, bound %d",
		clients, elapsed, elapsed/clients, maxLen, bound)
	if maxLen > bound {
		t.Fatalf("map held %d buckets, bound %d", maxLen, bound)
	}
	if s := mw.Stats(); s.Allowed != clients {
		t.Fatalf("stats %+v", s)
	}
	// idle buckets can all go
	clock.Advance(3 * time.Minute)
	if n := src.Map().Sweep(); n == 0 || src.Map().Len() != 0 {
		t.Errorf("sweep dropped %d, %d left", n, src.Map().Len())
	}
}

// The key→bucket path alone, without HTTP: the same bound.
func TestBoundedMemoryTakeDirect(t *testing.T) {
	const clients, bound = 1_000_000, 4096
	src := NewLocal(StaticPlan(config(t, core.Greedy(5, 5, time.Second))), WithMaxClients(bound))
	ctx := context.Background()
	key := make([]byte, 0, 16)
	for i := range clients {
		key = append(key[:0], "client-"...)
		key = appendUint(key, uint64(i))
		u, err := src.Take(ctx, string(key), 1)
		if err != nil || !u.Probe.Consumed || u.Probe.Remaining != 4 {
			t.Fatalf("client %d: %+v %v", i, u, err)
		}
		if i%4096 == 0 && src.Map().Len() > bound {
			t.Fatalf("map held %d buckets, bound %d", src.Map().Len(), bound)
		}
	}
	if n := src.Map().Len(); n > bound {
		t.Fatalf("map held %d buckets, bound %d", n, bound)
	}
}

func appendUint(b []byte, v uint64) []byte {
	var buf [20]byte
	i := len(buf)
	for {
		i--
		buf[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			break
		}
	}
	return append(b, buf[i:]...)
}
