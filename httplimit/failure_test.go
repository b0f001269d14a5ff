package httplimit

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/cas/memstore"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/core/wire"
)

var errOutage = errors.New("store: connection refused")

// brokenStore fails every call, or hangs: honouring ctx, or ignoring it
// until release is closed.
type brokenStore struct {
	cas.Store        // the base SPI only: memstore's Writer and Batcher would bypass the overrides
	mode      string // "error", "hang", "deaf"
	release   chan struct{}
}

func (s *brokenStore) fail(ctx context.Context) error {
	switch s.mode {
	case "hang":
		<-ctx.Done()
		return ctx.Err()
	case "deaf":
		<-s.release
		return errOutage
	}
	return errOutage
}

func (s *brokenStore) Get(ctx context.Context, key string) ([]byte, cas.Version, bool, error) {
	return nil, 0, false, s.fail(ctx)
}

// brokenExecutor fails every request.
type brokenExecutor struct{}

func (brokenExecutor) Execute(context.Context, string, wire.Request) (wire.Response, error) {
	return wire.Response{}, errOutage
}
func (brokenExecutor) Remove(context.Context, string) error { return errOutage }

func TestFailOpenAndClosed(t *testing.T) {
	cfg := config(t, core.Greedy(10, 10, time.Second))
	plan := StaticPlan(cfg)
	deaf := &brokenStore{Store: memstore.New(), mode: "deaf", release: make(chan struct{})}
	t.Cleanup(func() { close(deaf.release) })
	managed := func(exec bucketgrid.Executor) Buckets {
		return NewManaged(bucketgrid.NewManager(exec), plan)
	}
	tests := []struct {
		name    string
		src     Buckets
		timeout time.Duration
		wantErr error
	}{
		{"store errors", managed(cas.New(&brokenStore{Store: memstore.New(), mode: "error"})), time.Second, cas.ErrStore},
		{"executor errors", managed(brokenExecutor{}), time.Second, errOutage},
		{"store hangs until the deadline", managed(cas.New(&brokenStore{Store: memstore.New(), mode: "hang"})), 20 * time.Millisecond, ErrTimeout},
		{"store ignores the deadline", managed(cas.New(deaf)), 20 * time.Millisecond, ErrTimeout},
		{"plan fails (local)", NewLocal(func(string) (core.Config, error) { return core.Config{}, errOutage }), time.Second, errOutage},
	}
	for _, tt := range tests {
		for _, open := range []bool{true, false} {
			name := tt.name + "/closed"
			if open {
				name = tt.name + "/open"
			}
			t.Run(name, func(t *testing.T) {
				var hooked []error
				var mu sync.Mutex
				var served atomic.Int32
				mw := New(tt.src, WithFailOpen(open), WithTimeout(tt.timeout),
					WithErrorHook(func(r *http.Request, err error) {
						mu.Lock()
						hooked = append(hooked, err)
						mu.Unlock()
					}))
				h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served.Add(1) }))
				start := time.Now()
				w := get(h, "198.51.100.1:1", "/")
				if elapsed := time.Since(start); elapsed > tt.timeout+15*time.Second { // a hang, not a slow machine
					t.Errorf("decided after %v, deadline %v", elapsed, tt.timeout)
				}
				s := mw.Stats()
				if open {
					if w.Code != 200 || served.Load() != 1 || s.FailedOpen != 1 || s.FailedClosed != 0 {
						t.Errorf("fail-open: status %d, served %d, stats %+v", w.Code, served.Load(), s)
					}
					if w.Header().Get("RateLimit") != "" {
						t.Error("fail-open response carries RateLimit")
					}
				} else {
					if w.Code != 503 || served.Load() != 0 || s.FailedClosed != 1 || s.FailedOpen != 0 {
						t.Errorf("fail-closed: status %d, served %d, stats %+v", w.Code, served.Load(), s)
					}
					checkProblem(t, w, 503)
				}
				mu.Lock()
				defer mu.Unlock()
				if len(hooked) != 1 || !errors.Is(hooked[0], tt.wantErr) {
					t.Errorf("hook got %v, want one error wrapping %v", hooked, tt.wantErr)
				}
			})
		}
	}
}

// A client that hangs up before the bucket answers is counted apart, not as
// a backend failure.
func TestClientGone(t *testing.T) {
	src := NewManaged(bucketgrid.NewManager(cas.New(&brokenStore{Store: memstore.New(), mode: "hang"})),
		StaticPlan(config(t, core.Greedy(1, 1, time.Second))))
	var hooked atomic.Int32
	mw := New(src, WithTimeout(time.Minute), WithErrorHook(func(*http.Request, error) { hooked.Add(1) }))
	ctx, cancel := context.WithCancel(context.Background())
	r := httptest.NewRequest("GET", "/", nil).WithContext(ctx)
	done := make(chan struct{})
	go func() {
		mw.Handler(ok).ServeHTTP(httptest.NewRecorder(), r)
		close(done)
	}()
	cancel()
	<-done
	if s := mw.Stats(); s.Canceled != 1 || s.FailedOpen != 0 || hooked.Load() != 0 {
		t.Errorf("stats %+v, hook calls %d", s, hooked.Load())
	}
}
