package httplimit

import (
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/core"
)

// TestWalkProbe serves one request through the middleware on a Manager over
// the memory store, the bucket absent (the longer walk: the Manager fetches
// the configuration). internal/layers' TestWalk runs it with every function
// of the workspace instrumented and judges the path it records.
func TestWalkProbe(t *testing.T) {
	c := clock.NewFake(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	b := NewManaged(bucketgrid.NewManager(store(c), keep), StaticPlan(config(t, core.Greedy(5, 5, time.Minute))), WithClock(c))
	// an hour: the instrumented build is slow, and a request that gave up
	// on the Manager would fail open without its walk
	h := New(b, WithTimeout(time.Hour)).Handler(ok)
	rec := walkRequest(h, httptest.NewRequest("GET", "/", nil))
	if rec.Code != http.StatusOK || rec.Header().Get("RateLimit") == "" {
		t.Fatalf("first request answered %d with RateLimit %q, want 200 from the bucket", rec.Code, rec.Header().Get("RateLimit"))
	}
}

// walkRequest is the request internal/layers' TestWalk records: with
// BUCKETGRID_WALK_OUT set, the instrumented functions append their stacks
// to that file while it runs.
func walkRequest(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	if out := os.Getenv("BUCKETGRID_WALK_OUT"); out != "" {
		os.Setenv("BUCKETGRID_WALK_FILE", out)
		defer os.Unsetenv("BUCKETGRID_WALK_FILE")
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec
}
