package httplimit

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/cas/memstore"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/policy"
)

// FuzzKeyPath sends any header value, of any length and bytes, as an API key
// through the middleware over a backend with a key rule (ruleStore: 64
// bytes, UTF-8), with and without WithFitKeys, and over local buckets. Every
// request must end in a decision (200 or 429) or a 400, exactly where the
// rules say: never fail open, never fail closed, never panic, and a 400 never
// shows the value. `go test` runs it over the seed corpus (testdata/fuzz and
// the seeds below); `go test -fuzz FuzzKeyPath ./httplimit` explores.
func FuzzKeyPath(f *testing.F) {
	for _, seed := range []string{
		"", " ", "\t", "k", "sk_live_0123456789abcdef",
		strings.Repeat("a", ruleLen-len("X-Api-Key:")), strings.Repeat("a", ruleLen-len("X-Api-Key:")+1),
		strings.Repeat("b", policy.MaxKeyBytes), strings.Repeat("b", policy.MaxKeyBytes+1), strings.Repeat("c", 10_000), strings.Repeat("m", 1<<20),
		"caf\xe9", "\xff\xfe", "\x00", "a\x00b", "line\r\nbreak", "#" + strings.Repeat("d", 43),
		core.DigestKey("X-Api-Key:" + strings.Repeat("a", 100)), "日本語のキー", " padded ",
	} {
		f.Add(seed)
	}
	cfg := core.Config{Bandwidths: []core.Bandwidth{core.Intervally(3, 3, time.Hour)}}
	plan := StaticPlan(cfg)
	key := HeaderKey("X-Api-Key", nil)
	type target struct {
		name string
		mw   *Middleware
		fits bool // keys beyond the backend's rule get a bucket
	}
	// No timeout: the memstore never hangs, and a loaded machine must not
	// turn a slow answer into the failure mode.
	targets := []target{
		{"managed", New(NewManaged(bucketgrid.NewManager(cas.New(ruleStore{memstore.New()})), plan),
			WithKey(key), WithFailOpen(true), WithTimeout(0)), false},
		{"managed, WithFitKeys", New(NewManaged(bucketgrid.NewManager(cas.New(ruleStore{memstore.New()}),
			bucketgrid.WithFitKeys(ruleLen)), plan), WithKey(key), WithFailOpen(true), WithTimeout(0)), true},
		{"local", New(NewLocal(plan), WithKey(key), WithFailOpen(true)), true},
	}
	f.Fuzz(func(t *testing.T, value string) {
		trimmed := strings.TrimSpace(value)
		stored := "X-Api-Key:" + trimmed
		for _, tg := range targets {
			before := tg.mw.Stats()
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = "198.51.100.1:1"
			r.Header["X-Api-Key"] = []string{value}
			w := httptest.NewRecorder()
			tg.mw.Handler(ok).ServeHTTP(w, r)

			want400 := trimmed == "" || len(trimmed) > policy.MaxKeyBytes ||
				(!tg.fits && (len(stored) > ruleLen || !utf8.ValidString(stored)))
			switch {
			case want400 && w.Code != 400:
				t.Fatalf("%s: value of %d bytes: status %d, want 400", tg.name, len(value), w.Code)
			case !want400 && w.Code != 200 && w.Code != 429:
				t.Fatalf("%s: value of %d bytes: status %d, want a decision", tg.name, len(value), w.Code)
			}
			if w.Code == 400 && len(trimmed) >= 16 && strings.Contains(w.Body.String(), trimmed) {
				t.Fatalf("%s: the 400 shows the key", tg.name)
			}
			after := tg.mw.Stats()
			if after.FailedOpen != before.FailedOpen || after.FailedClosed != before.FailedClosed || after.Panicked != before.Panicked {
				t.Fatalf("%s: value of %d bytes: stats %+v: no client key may reach the failure mode", tg.name, len(value), after)
			}
		}
	})
}
