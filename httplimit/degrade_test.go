package httplimit

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/cas/memstore"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/core/wire"
)

// TestDegradeAgainstFailOpenAndClosed sends one client's requests while the
// store is down under each failure mode: fail-open serves them all,
// fail-closed refuses them all, degrade serves the client's share (6 an
// hour over 2 instances: 3) with headers that describe the share.
func TestDegradeAgainstFailOpenAndClosed(t *testing.T) {
	plan := StaticPlan(config(t, core.Greedy(6, 6, time.Hour)))
	two := bucketgrid.Degrade{Instances: func() int { return 2 }}
	tests := []struct {
		name  string
		opts  []ManagedOption
		open  bool
		codes []int
		want  Stats
	}{
		{"fail-open", nil, true, []int{200, 200, 200, 200, 200}, Stats{FailedOpen: 5}},
		{"fail-closed", nil, false, []int{503, 503, 503, 503, 503}, Stats{FailedClosed: 5}},
		{"degrade", []ManagedOption{WithDegrade(two)}, true, []int{200, 200, 200, 429, 429},
			Stats{DegradedAllowed: 3, DegradedLimited: 2}},
		{"degrade, fail-closed otherwise", []ManagedOption{WithDegrade(two)}, false, []int{200, 200, 200, 429, 429},
			Stats{DegradedAllowed: 3, DegradedLimited: 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			exec := cas.New(&brokenStore{Store: memstore.New(), mode: "error"})
			mw := New(NewManaged(bucketgrid.NewManager(exec), plan, tt.opts...), WithFailOpen(tt.open))
			h := mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			for i, code := range tt.codes {
				w := get(h, "198.51.100.1:1", "/")
				if w.Code != code {
					t.Fatalf("request %d: status %d, want %d", i, w.Code, code)
				}
				if tt.opts == nil {
					continue
				}
				if got, want := w.Header().Get("RateLimit-Policy"), `"default";q=3;w=3600`; got != want {
					t.Errorf("request %d: RateLimit-Policy %q, want the share's %q", i, got, want)
				}
			}
			if got := mw.Stats(); got != tt.want {
				t.Fatalf("stats %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestDegradeKeepsRefusals checks that degrade answers what fail-open
// answers for failures that are no outage: an invalid plan is a 503, a key
// the backend cannot hold a 400.
func TestDegradeKeepsRefusals(t *testing.T) {
	bad := func(string) (core.Config, error) { return core.Config{}, nil }
	exec := cas.New(&brokenStore{Store: memstore.New(), mode: "error"})
	mw := New(NewManaged(bucketgrid.NewManager(exec), bad, WithDegrade(bucketgrid.Degrade{})))
	h := mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	if w := get(h, "198.51.100.1:1", "/"); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("invalid plan during an outage: %d, want 503", w.Code)
	}
	mw = New(NewManaged(bucketgrid.NewManager(keyRefuser{}), StaticPlan(config(t, core.Greedy(6, 6, time.Hour))),
		WithDegrade(bucketgrid.Degrade{})))
	h = mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	if w := get(h, "198.51.100.1:1", "/"); w.Code != http.StatusBadRequest {
		t.Fatalf("key the backend refuses: %d, want 400", w.Code)
	}
	if st := mw.Stats(); st.DegradedAllowed+st.DegradedLimited != 0 {
		t.Fatalf("stats %+v: decided locally", st)
	}
}

// keyRefuser refuses every key as one its storage cannot hold.
type keyRefuser struct{ brokenExecutor }

func (keyRefuser) Execute(_ context.Context, key string, _ wire.Request) (wire.Response, error) {
	return wire.Response{}, core.InvalidKey(key, "not storable")
}
