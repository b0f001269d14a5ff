package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/cas/memstore"
	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/httplimit"
)

// A Spring Boot rate-limited API in Go: 10 requests a minute per client IP,
// refilled at once each minute, health checks unlimited. A fake clock makes
// the output exact.
func ExampleNew() {
	clock := clock.NewFake(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	plan := httplimit.StaticPlan(core.Config{Bandwidths: []core.Bandwidth{
		core.Intervally(10, 10, time.Minute).WithID("minute")}})
	limit := httplimit.New(httplimit.NewLocal(plan, httplimit.WithClock(clock)),
		httplimit.WithExcept("GET /healthz"))

	api := http.NewServeMux()
	api.HandleFunc("GET /v1/quotes/random", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, `{"quote":"Simplicity is prerequisite for reliability."}`)
	})
	api.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {})
	handler := limit.Handler(api)

	call := func(path string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", path, nil)
		r.RemoteAddr = "198.51.100.7:50123"
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, r)
		return w
	}

	w := call("/v1/quotes/random")
	fmt.Println(w.Code, w.Header().Get("RateLimit-Policy"))
	fmt.Println(w.Code, w.Header().Get("RateLimit"))

	clock.Advance(15 * time.Second)
	for range 9 {
		call("/v1/quotes/random")
	}
	w = call("/v1/quotes/random")
	fmt.Println(w.Code, w.Header().Get("RateLimit"), "Retry-After:", w.Header().Get("Retry-After"))
	fmt.Println(w.Header().Get("Content-Type"))
	fmt.Println(strings.TrimSpace(w.Body.String()))
	fmt.Println(call("/healthz").Code)
	// Output:
	// 200 "minute";q=10;w=60
	// 200 "minute";r=9;t=60
	// 429 "minute";r=0;t=45 Retry-After: 45
	// application/problem+json
	// {"type":"about:blank","title":"Too Many Requests","status":429,"detail":"rate limit \"minute\" exceeded; retry in 45 s","policies":["minute"],"retry_after":45}
	// 200
}

// Distributed buckets: every process built over the same store shares each
// client's bucket; every RateLimit item is exact, from the same round trip
// as the decision. Paid API keys get a bigger plan, decided once per key when
// its bucket is created.
func ExampleNewManaged() {
	clock := clock.NewFake(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	exec := cas.New(memstore.New(memstore.WithClock(clock)), cas.WithClock(clock))
	m := bucketgrid.NewManager(exec)

	free := core.Config{Bandwidths: []core.Bandwidth{
		core.Greedy(10, 10, time.Minute).WithID("minute"),
		core.Intervally(100, 100, 24*time.Hour).WithID("day")}}
	paid := core.Config{Bandwidths: []core.Bandwidth{
		core.Greedy(1000, 1000, time.Minute).WithID("minute")}}
	plan := func(key string) (core.Config, error) {
		if strings.HasPrefix(key, "X-Api-Key:paid_") {
			return paid, nil
		}
		return free, nil
	}
	limit := httplimit.New(httplimit.NewManaged(m, plan, httplimit.WithClock(clock)),
		httplimit.WithKey(httplimit.HeaderKey("X-Api-Key", httplimit.ClientIP{}.Key)))
	handler := limit.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))

	for _, key := range []string{"free_1", "paid_1"} {
		r := httptest.NewRequest("GET", "/v1/search", nil)
		r.Header.Set("X-Api-Key", key)
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, r)
		fmt.Println(key, w.Code, w.Header().Get("RateLimit-Policy"))
		fmt.Println(key, w.Code, w.Header().Get("RateLimit"))
	}
	// Output:
	// free_1 200 "minute";q=10;w=60, "day";q=100;w=86400
	// free_1 200 "minute";r=9;t=6, "day";r=99;t=86400
	// paid_1 200 "minute";q=1000;w=60
	// paid_1 200 "minute";r=999;t=1
}
