package httplimit

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/cas/memstore"
	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/core/wire"
	"github.com/bucketgrid/bucketgrid/internal/header"
	"github.com/bucketgrid/bucketgrid/policy"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func config(t testing.TB, bws ...core.Bandwidth) core.Config {
	t.Helper()
	cfg, err := core.NewConfig(bws...)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

var ok = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })

// source builds Buckets of a kind over a fake clock.
type source struct {
	name  string
	build func(plan Plan, clock *clock.Fake) Buckets
	exact bool // per-bandwidth values known
}

func store(clock *clock.Fake) *cas.Executor {
	return cas.New(memstore.New(memstore.WithClock(clock)), cas.WithClock(clock))
}

// The managed sources keep their buckets, as the reference model of the
// header tests does: a bucket expired once full (the Manager's default) and
// created again restarts an intervally refill's interval, later than the
// model's (stricter, never looser), so its t values would differ.
var sources = []source{
	{"local", func(plan Plan, clock *clock.Fake) Buckets {
		return NewLocal(plan, WithClock(clock))
	}, true},
	{"managed", func(plan Plan, clock *clock.Fake) Buckets {
		return NewManaged(bucketgrid.NewManager(store(clock), keep), plan, WithClock(clock))
	}, true},
	{"minimum only", func(plan Plan, clock *clock.Fake) Buckets {
		return minimumOnly{NewManaged(bucketgrid.NewManager(store(clock), keep), plan, WithClock(clock))}
	}, false},
}

var keep = bucketgrid.WithExpiration(wire.Expiry{})

func get(h http.Handler, remote, path string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("GET", path, nil)
	r.RemoteAddr = remote
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// The shared-bucket bug of a naive Spring Boot limiter: every client must get its own
// bucket, created fresh.
func TestPerClientIsolation(t *testing.T) {
	for _, src := range sources {
		t.Run(src.name, func(t *testing.T) {
			clock := clock.NewFake(t0)
			cfg := config(t, core.Intervally(10, 10, time.Minute).WithID("minute"))
			mw := New(src.build(StaticPlan(cfg), clock))
			h := mw.Handler(ok)
			for i := range 10 {
				if w := get(h, "198.51.100.1:1000", "/"); w.Code != 200 {
					t.Fatalf("client A request %d: %d", i+1, w.Code)
				}
			}
			if w := get(h, "198.51.100.1:1001", "/"); w.Code != 429 {
				t.Fatalf("client A request 11: %d, want 429", w.Code)
			}
			for i := range 10 {
				w := get(h, "198.51.100.2:1000", "/")
				if w.Code != 200 {
					t.Fatalf("client B request %d: %d (buckets shared?)", i+1, w.Code)
				}
				if want := fmt.Sprintf(`"minute";r=%d;t=60`, 9-i); w.Header().Get("RateLimit") != want {
					t.Errorf("client B RateLimit = %q, want %q", w.Header().Get("RateLimit"), want)
				}
			}
			if s := mw.Stats(); s.Allowed != 20 || s.Limited != 1 {
				t.Errorf("stats %+v", s)
			}
		})
	}
}

// Plans: the key decides the configuration, once, when the bucket is made.
func TestPlans(t *testing.T) {
	free := config(t, core.Intervally(2, 2, time.Minute).WithID("free"))
	paid := config(t, core.Intervally(5, 5, time.Minute).WithID("paid"))
	var calls int
	plan := func(key string) (core.Config, error) {
		calls++
		if strings.HasPrefix(key, "X-Api-Key:paid-") {
			return paid, nil
		}
		return free, nil
	}
	for _, src := range sources[:2] { // the lazy ones
		t.Run(src.name, func(t *testing.T) {
			calls = 0
			clock := clock.NewFake(t0)
			h := New(src.build(plan, clock), WithKey(HeaderKey("X-Api-Key", nil))).Handler(ok)
			served := map[string]int{}
			for range 10 {
				for _, key := range []string{"free-1", "paid-1", "paid-2"} {
					r := httptest.NewRequest("GET", "/", nil)
					r.Header.Set("X-Api-Key", key)
					w := httptest.NewRecorder()
					h.ServeHTTP(w, r)
					if w.Code == 200 {
						served[key]++
					}
				}
			}
			if served["free-1"] != 2 || served["paid-1"] != 5 || served["paid-2"] != 5 {
				t.Errorf("served %v", served)
			}
			if calls != 3 {
				t.Errorf("plan called %d times, want once per client", calls)
			}
		})
	}
}

// expected computes, from core alone, what a request at now should be told:
// it mirrors the request on a reference bucket and searches, second by
// second, for the first whole second at which each bandwidth has what t
// promises, using nothing but refill.
type expected struct {
	code       int
	rateLimit  string
	retryAfter string
	xRemaining string
}

func expect(ref *core.State, now int64) expected {
	p := ref.TryConsumeAndReturnRemaining(1, now)
	c := ref.Clone()
	d := c.Diagnose(now)
	bws := ref.Config.Bandwidths
	var items []string
	minAvail := int64(math.MaxInt64)
	for i := range bws {
		avail := d.Available[i]
		minAvail = min(minAvail, avail)
		want := int64(0)
		switch {
		case avail < 1:
			want = 1
		case avail < bws[i].Capacity:
			want = avail + 1
		}
		secs := int64(0)
		if want > 0 {
			one := core.State{Config: core.Config{Bandwidths: bws[i : i+1]},
				Bands: []core.BandState{d.State.Bands[i]}}
			for secs = 1; one.AvailableTokens(now+secs*int64(time.Second)) < want; secs++ {
			}
		}
		items = append(items, fmt.Sprintf("%s;r=%d;t=%d", strconv.Quote(policyName(bws, i)), max(avail, 0), secs))
	}
	e := expected{code: 200, rateLimit: strings.Join(items, ", "), xRemaining: strconv.FormatInt(max(minAvail, 0), 10)}
	if !p.Consumed {
		e.code = 429
		// the smallest whole number of seconds at which the request succeeds
		var secs int64 = 1
		for ; ; secs++ {
			c := ref.Clone()
			if c.EstimateAbilityToConsume(1, now+secs*int64(time.Second)).CanBeConsumed {
				break
			}
		}
		e.retryAfter = strconv.FormatInt(secs, 10)
	}
	return e
}

func TestHeadersExact(t *testing.T) {
	tests := []struct {
		name   string
		bws    []core.Bandwidth
		policy string
	}{
		{"greedy, no id", []core.Bandwidth{core.Greedy(10, 10, time.Minute)}, `"default";q=10;w=60`},
		{"intervally (a Spring Boot plan)", []core.Bandwidth{core.Intervally(10, 10, time.Minute).WithID("minute")}, `"minute";q=10;w=60`},
		{"fractional window", []core.Bandwidth{core.Greedy(3, 2, 1500*time.Millisecond).WithID("odd")}, `"odd";q=3;w=3`},
		{"burst and hourly", []core.Bandwidth{
			core.Greedy(5, 1, 2*time.Second).WithID("burst"),
			core.Intervally(20, 20, time.Hour).WithID("hourly")},
			`"burst";q=5;w=10, "hourly";q=20;w=3600`},
		{"two without ids", []core.Bandwidth{core.Greedy(4, 4, time.Second), core.Greedy(6, 1, time.Minute)},
			`"0";q=4;w=1, "1";q=6;w=360`},
	}
	// advance before each request
	steps := []time.Duration{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		1300 * time.Millisecond, 0, 0, 700 * time.Millisecond, 0, 7 * time.Second, 0, 0,
		time.Second / 3, 0, 61 * time.Second, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		59*time.Minute + 999*time.Millisecond, 0, 0, 2 * time.Hour, 0}
	for _, src := range sources[:2] {
		for _, tt := range tests {
			t.Run(src.name+"/"+tt.name, func(t *testing.T) {
				cfg := config(t, tt.bws...)
				clock := clock.NewFake(t0)
				h := New(src.build(StaticPlan(cfg), clock), WithHeaders(policy.IETFHeaders|policy.XRateLimitHeaders)).Handler(ok)
				ref := core.NewState(cfg.Clone(), clock.Now())
				var limited int
				for i, d := range steps {
					clock.Advance(d)
					now := clock.Now()
					want := expect(&ref, now)
					w := get(h, "198.51.100.1:1", "/")
					hd := w.Header()
					if w.Code != want.code {
						t.Fatalf("request %d: status %d, want %d", i, w.Code, want.code)
					}
					if got := hd.Get("RateLimit-Policy"); got != tt.policy {
						t.Errorf("request %d: RateLimit-Policy %q, want %q", i, got, tt.policy)
					}
					if got := hd.Get("RateLimit"); got != want.rateLimit {
						t.Errorf("request %d: RateLimit %q, want %q", i, got, want.rateLimit)
					}
					if got := hd.Get("Retry-After"); got != want.retryAfter {
						t.Errorf("request %d: Retry-After %q, want %q", i, got, want.retryAfter)
					}
					if got := hd.Get("X-RateLimit-Remaining"); got != want.xRemaining {
						t.Errorf("request %d: X-RateLimit-Remaining %q, want %q", i, got, want.xRemaining)
					}
					if w.Code == 429 {
						limited++
						checkProblem(t, w, 429)
					}
				}
				if limited == 0 {
					t.Error("scenario never limited")
				}
			})
		}
	}
}

func checkProblem(t *testing.T, w *httptest.ResponseRecorder, status int) Problem {
	t.Helper()
	if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type %q", ct)
	}
	var p Problem
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatalf("body %q: %v", w.Body.String(), err)
	}
	if p.Status != status || p.Type == "" || p.Title != http.StatusText(status) || p.Detail == "" {
		t.Errorf("problem %+v", p)
	}
	return p
}

// Retry-After: core's wait rounded up, never before the refill, across
// sub-second offsets.
func TestRetryAfterNeverEarly(t *testing.T) {
	cfg := config(t, core.Greedy(3, 1, 700*time.Millisecond).WithID("b"))
	clock := clock.NewFake(t0)
	h := New(NewLocal(StaticPlan(cfg), WithClock(clock))).Handler(ok)
	ref := core.NewState(cfg.Clone(), clock.Now())
	checked := 0
	for i := range 400 {
		clock.Advance(time.Duration(i%7) * 37 * time.Millisecond)
		now := clock.Now()
		p := ref.TryConsumeAndReturnRemaining(1, now)
		w := get(h, "198.51.100.1:1", "/")
		if p.Consumed != (w.Code == 200) {
			t.Fatalf("request %d: status %d, core consumed=%v", i, w.Code, p.Consumed)
		}
		if p.Consumed {
			continue
		}
		checked++
		ra, err := strconv.ParseInt(w.Header().Get("Retry-After"), 10, 64)
		if err != nil || ra < 1 {
			t.Fatalf("Retry-After %q", w.Header().Get("Retry-After"))
		}
		if time.Duration(ra)*time.Second < p.WaitForRefill {
			t.Fatalf("Retry-After %d s is earlier than the refill in %v", ra, p.WaitForRefill)
		}
		if time.Duration(ra-1)*time.Second >= p.WaitForRefill && ra > 1 {
			t.Fatalf("Retry-After %d s is not the ceiling of %v", ra, p.WaitForRefill)
		}
		pb := checkProblem(t, w, 429)
		if pb.RetryAfter != ra || len(pb.Policies) != 1 || pb.Policies[0] != "b" {
			t.Errorf("problem %+v", pb)
		}
	}
	if checked < 50 {
		t.Fatalf("only %d refusals checked", checked)
	}
}

// Which limit fired is named in the problem body.
func TestProblemNamesFiredLimit(t *testing.T) {
	cfg := config(t, core.Greedy(5, 5, time.Second).WithID("burst"), core.Intervally(8, 8, time.Hour).WithID("hourly"))
	for _, src := range sources {
		t.Run(src.name, func(t *testing.T) {
			clock := clock.NewFake(t0)
			h := New(src.build(StaticPlan(cfg), clock)).Handler(ok)
			var last Problem
			for range 6 {
				if w := get(h, "198.51.100.1:1", "/"); w.Code == 429 {
					last = checkProblem(t, w, 429)
				}
			}
			if src.exact && strings.Join(last.Policies, ",") != "burst" {
				t.Errorf("fired %v, want burst", last.Policies)
			}
			clock.Advance(10 * time.Second) // burst refilled, hourly has 3 left
			for range 4 {
				if w := get(h, "198.51.100.1:1", "/"); w.Code == 429 {
					last = checkProblem(t, w, 429)
					if ra := w.Header().Get("Retry-After"); ra != "3590" {
						t.Errorf("Retry-After %s, want 3590", ra)
					}
				}
			}
			if src.exact && strings.Join(last.Policies, ",") != "hourly" {
				t.Errorf("fired %v, want hourly", last.Policies)
			}
		})
	}
}

// minimumOnly is a Buckets that knows only the probe, as a user's own
// Buckets may: Usage.Bands is nil.
type minimumOnly struct{ Buckets }

func (m minimumOnly) Take(ctx context.Context, key string, cost int64) (Usage, error) {
	u, err := m.Buckets.Take(ctx, key, cost)
	u.Bands = nil
	return u, err
}

// When only the minimum is known, every item carries it.
func TestMinimumOnly(t *testing.T) {
	cfg := config(t, core.Greedy(5, 1, time.Second).WithID("burst"), core.Intervally(20, 20, time.Hour).WithID("hourly"))
	clock := clock.NewFake(t0)
	h := New(sources[2].build(StaticPlan(cfg), clock)).Handler(ok)
	ref := core.NewState(cfg.Clone(), clock.Now())
	for i := range 7 {
		p := ref.TryConsumeAndReturnRemaining(1, clock.Now())
		w := get(h, "198.51.100.1:1", "/")
		var want string
		if p.Consumed {
			ts := header.Seconds(p.WaitForReset)
			want = fmt.Sprintf(`"burst";r=%d;t=%d, "hourly";r=%d;t=%d`, p.Remaining, ts, p.Remaining, ts)
		} else {
			ts := header.Seconds(p.WaitForRefill)
			want = fmt.Sprintf(`"burst";r=0;t=%d, "hourly";r=0;t=%d`, ts, ts)
			if w.Header().Get("Retry-After") != strconv.FormatInt(ts, 10) {
				t.Errorf("Retry-After %q", w.Header().Get("Retry-After"))
			}
		}
		if got := w.Header().Get("RateLimit"); got != want {
			t.Errorf("request %d: RateLimit %q, want %q", i, got, want)
		}
	}
}

func TestCostAndCapacity(t *testing.T) {
	cfg := config(t, core.Greedy(10, 10, time.Second).WithID("s"))
	clock := clock.NewFake(t0)
	cost := func(r *http.Request) int64 {
		n, _ := strconv.ParseInt(r.URL.Query().Get("cost"), 10, 64)
		return n
	}
	h := New(NewLocal(StaticPlan(cfg), WithClock(clock)), WithCost(cost)).Handler(ok)
	if w := get(h, "198.51.100.1:1", "/?cost=4"); w.Code != 200 || w.Header().Get("RateLimit") != `"s";r=6;t=1` {
		t.Errorf("cost 4: %d %q", w.Code, w.Header().Get("RateLimit"))
	}
	if w := get(h, "198.51.100.1:1", "/?cost=0"); w.Code != 200 || w.Header().Get("RateLimit") != `"s";r=5;t=1` {
		t.Errorf("cost 0 (taken as 1): %d %q", w.Code, w.Header().Get("RateLimit"))
	}
	w := get(h, "198.51.100.1:1", "/?cost=11")
	if w.Code != 429 || w.Header().Get("Retry-After") != "" || w.Header().Get("RateLimit") != `"s";r=5` {
		t.Errorf("cost above capacity: %d Retry-After %q RateLimit %q", w.Code, w.Header().Get("Retry-After"), w.Header().Get("RateLimit"))
	}
	checkProblem(t, w, 429)
	// a cost of 7 with 5 left: t is the wait for 7, not for the next token
	w = get(h, "198.51.100.1:1", "/?cost=7")
	if w.Code != 429 || w.Header().Get("Retry-After") != "1" || w.Header().Get("RateLimit") != `"s";r=5;t=1` {
		t.Errorf("cost 7: %d Retry-After %q RateLimit %q", w.Code, w.Header().Get("Retry-After"), w.Header().Get("RateLimit"))
	}
}

func TestSkip(t *testing.T) {
	cfg := config(t, core.Intervally(1, 1, time.Hour))
	clock := clock.NewFake(t0)
	mw := New(NewLocal(StaticPlan(cfg), WithClock(clock)),
		WithOnly("/v1/", "/v2/"), WithExcept("GET /v1/healthz", "/v2/docs/"),
		WithSkip(func(r *http.Request) bool { return r.Header.Get("X-Internal") == "yes" }))
	h := mw.Handler(ok)
	tests := []struct {
		method, path string
		internal     bool
		limited      bool
	}{
		{"GET", "/", false, false},
		{"GET", "/static/app.js", false, false},
		{"GET", "/v1/healthz", false, false},
		{"GET", "/v2/docs/index.html", false, false},
		{"GET", "/v1/items", true, false},
		{"POST", "/v1/healthz", false, true},
		{"GET", "/v1/items", false, true},
		{"GET", "/v2/items", false, true},
	}
	for _, tt := range tests {
		clock.Advance(2 * time.Hour) // one fresh token each time
		get(h, "198.51.100.1:1", "/v1/burn")
		r := httptest.NewRequest(tt.method, tt.path, nil)
		r.RemoteAddr = "198.51.100.1:1"
		if tt.internal {
			r.Header.Set("X-Internal", "yes")
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if got := w.Code == 429; got != tt.limited {
			t.Errorf("%s %s: status %d, limited want %v", tt.method, tt.path, w.Code, tt.limited)
		}
		if !tt.limited && w.Header().Get("RateLimit") != "" {
			t.Errorf("%s %s: skipped request got headers", tt.method, tt.path)
		}
	}
	if s := mw.Stats(); s.Skipped != 5 {
		t.Errorf("skipped %d, want 5", s.Skipped)
	}
}

func TestBadKey(t *testing.T) {
	mw := New(NewLocal(StaticPlan(config(t, core.Greedy(1, 1, time.Second)))), WithKey(HeaderKey("X-Api-Key", nil)))
	w := get(mw.Handler(ok), "198.51.100.1:1", "/")
	if w.Code != 400 {
		t.Fatalf("status %d", w.Code)
	}
	checkProblem(t, w, 400)
	if mw.Stats().BadKey != 1 {
		t.Errorf("stats %+v", mw.Stats())
	}
}

func TestHeadersOff(t *testing.T) {
	mw := New(NewLocal(StaticPlan(config(t, core.Greedy(1, 1, time.Minute)))), WithHeaders(0))
	h := mw.Handler(ok)
	if w := get(h, "198.51.100.1:1", "/"); len(w.Header()) != 0 {
		t.Errorf("headers %v", w.Header())
	}
	w := get(h, "198.51.100.1:1", "/")
	if w.Header().Get("Retry-After") != "60" || w.Header().Get("RateLimit") != "" {
		t.Errorf("429 headers %v", w.Header())
	}
}

// Concurrent requests of one client: exactly the capacity is served, for
// every kind of bucket.
func TestConcurrentExact(t *testing.T) {
	const capacity, workers, each = 60, 4, 40
	cfg := config(t, core.Intervally(capacity, capacity, time.Hour).WithID("hour"))
	for _, src := range sources {
		t.Run(src.name, func(t *testing.T) {
			clock := clock.NewFake(t0)
			mw := New(src.build(StaticPlan(cfg), clock), WithTimeout(0))
			h := mw.Handler(ok)
			done := make(chan struct{})
			for range workers {
				go func() {
					defer func() { done <- struct{}{} }()
					for range each {
						get(h, "198.51.100.1:1", "/")
					}
				}()
			}
			for range workers {
				<-done
			}
			if s := mw.Stats(); s.Allowed != capacity || s.Limited != workers*each-capacity {
				t.Errorf("stats %+v, want %d allowed", s, capacity)
			}
		})
	}
}

// A client rotating X-Forwarded-For cannot escape its limit; clients behind
// a trusted proxy each get their own bucket.
func TestSpoofingThroughMiddleware(t *testing.T) {
	cfg := config(t, core.Intervally(3, 3, time.Hour))
	key := ClientIP{TrustedProxies: mustParsePrefixes("10.0.0.0/8")}.Key
	h := New(NewLocal(StaticPlan(cfg), WithClock(clock.NewFake(t0))), WithKey(key)).Handler(ok)
	send := func(remote, xff string) int {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = remote
		r.Header.Set("X-Forwarded-For", xff)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	served := 0
	for i := range 20 {
		if send("203.0.113.9:4000", fmt.Sprintf("198.51.100.%d", i)) == 200 {
			served++
		}
	}
	if served != 3 {
		t.Errorf("spoofing client served %d times, want 3", served)
	}
	for _, client := range []string{"198.51.100.1", "198.51.100.2", "2001:db8::7"} {
		served = 0
		for range 5 {
			if send("10.0.0.2:4000", "6.6.6.6, "+client) == 200 {
				served++
			}
		}
		if served != 3 {
			t.Errorf("client %s behind the proxy served %d times, want 3", client, served)
		}
	}
}

// TestOptionsTakenOnlyWhereTheyApply: each option is of a type that only
// the constructors taking it accept, so that giving it to another one is a
// compile error, and not even a type assertion turns it into an option of
// another constructor.
func TestOptionsTakenOnlyWhereTheyApply(t *testing.T) {
	kinds := []struct {
		name string
		typ  reflect.Type
	}{
		{"New", reflect.TypeFor[Option]()},
		{"NewLocal", reflect.TypeFor[LocalOption]()},
		{"NewManaged", reflect.TypeFor[ManagedOption]()},
	}
	tests := []struct {
		name  string
		opt   any
		takes []string
	}{
		{"WithKey", WithKey(nil), []string{"New"}},
		{"WithCost", WithCost(nil), []string{"New"}},
		{"WithSkip", WithSkip(nil), []string{"New"}},
		{"WithExcept", WithExcept("/x"), []string{"New"}},
		{"WithOnly", WithOnly("/x"), []string{"New"}},
		{"WithHeaders", WithHeaders(policy.IETFHeaders), []string{"New"}},
		{"WithTimeout", WithTimeout(time.Second), []string{"New"}},
		{"WithFailOpen", WithFailOpen(true), []string{"New"}},
		{"WithErrorHook", WithErrorHook(nil), []string{"New"}},
		{"WithProblemType", WithProblemType("about:blank"), []string{"New"}},
		{"WithClock", WithClock(nil), []string{"NewLocal", "NewManaged"}},
		{"WithMaxClients", WithMaxClients(3), []string{"NewLocal"}},
		{"WithIdleTimeout", WithIdleTimeout(time.Second), []string{"NewLocal"}},
		{"WithBucketOptions", WithBucketOptions(), []string{"NewManaged"}},
		{"WithDegrade", WithDegrade(bucketgrid.Degrade{}), []string{"NewManaged"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, k := range kinds {
				if k.typ.Kind() == reflect.Interface && reflect.TypeOf(tt.opt).Implements(k.typ) ||
					reflect.TypeOf(tt.opt) == k.typ {
					got = append(got, k.name)
				}
			}
			if !reflect.DeepEqual(got, tt.takes) {
				t.Fatalf("%s is an option of %v, want %v", tt.name, got, tt.takes)
			}
		})
	}
}

// A Managed Take reports the stored configuration version that decided:
// the one a handle asked for, or a newer one stored by another.
func TestManagedReportsConfigVersion(t *testing.T) {
	clk := clock.NewFake(t0)
	m := bucketgrid.NewManager(cas.New(memstore.New(memstore.WithClock(clk)), cas.WithClock(clk)))
	plan := StaticPlan(config(t, core.Greedy(5, 1, time.Minute)))
	ctx := context.Background()
	for _, tc := range []struct {
		asked, want int64
	}{{0, 0}, {3, 3}, {2, 3}} { // a handle asking for 2 meets the stored 3
		var opts []ManagedOption
		if tc.asked > 0 {
			opts = append(opts, WithBucketOptions(bucketgrid.WithConfigVersion(tc.asked, core.InheritAsIs)))
		}
		u, err := NewManaged(m, plan, append(opts, WithClock(clk))...).Take(ctx, fmt.Sprint("k", min(tc.asked, 1)), 1)
		if err != nil || u.ConfigVersion != tc.want {
			t.Errorf("asking for version %d: ConfigVersion %d (err %v), want %d", tc.asked, u.ConfigVersion, err, tc.want)
		}
	}
}
