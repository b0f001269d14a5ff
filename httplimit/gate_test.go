package httplimit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/cas/memstore"
	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/core/wire"
	"github.com/bucketgrid/bucketgrid/internal/harness/storetest"
	"github.com/bucketgrid/bucketgrid/retry"
)

// The tests of this file try to open the gate: each path that used to end in
// "allowed" without a decision.

// ruleStore is a memstore that holds only valid UTF-8 keys of at most
// ruleLen bytes, a backend's key rule, checked before any I/O.
type ruleStore struct{ cas.Store }

const ruleLen = 64

func (ruleStore) CheckKey(key string) error {
	switch {
	case len(key) > ruleLen:
		return core.InvalidKey(key, fmt.Sprintf("longer than %d bytes", ruleLen))
	case !utf8.ValidString(key):
		return core.InvalidKey(key, "not valid UTF-8")
	}
	return nil
}

// rawKey keys requests by the X-Key header exactly as sent, so that tests
// reach the backend's rule rather than HeaderKey's.
func rawKey(r *http.Request) (string, error) { return r.Header.Get("X-Key"), nil }

func getKey(h http.Handler, key string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "198.51.100.1:1"
	r.Header["X-Key"] = []string{key}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// hookErrs collects what the error hook receives.
type hookErrs struct {
	mu   sync.Mutex
	errs []error
}

func (h *hookErrs) hook(_ *http.Request, err error) {
	h.mu.Lock()
	h.errs = append(h.errs, err)
	h.mu.Unlock()
}

func (h *hookErrs) all() []error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]error(nil), h.errs...)
}

// TestKeyTheBackendCannotHold: a key one byte over the backend's rule, or
// not UTF-8, gets 400 with a fixed message, costs the store nothing, and
// never fails open; with WithFitKeys it gets a bucket of its own.
func TestKeyTheBackendCannotHold(t *testing.T) {
	cfg := config(t, core.Intervally(2, 2, time.Hour))
	for _, key := range []string{strings.Repeat("k", ruleLen+1), "caf\xe9"} {
		t.Run(fmt.Sprintf("%d bytes", len(key)), func(t *testing.T) {
			st := &storetest.Counting{Store: ruleStore{memstore.New()}}
			var hook hookErrs
			mw := New(NewManaged(bucketgrid.NewManager(cas.New(st)), StaticPlan(cfg)),
				WithKey(rawKey), WithFailOpen(true), WithErrorHook(hook.hook), WithTimeout(0))
			h := mw.Handler(ok)
			for range 5 {
				w := getKey(h, key)
				if w.Code != 400 {
					t.Fatalf("status %d, want 400", w.Code)
				}
				if p := checkProblem(t, w, 400); p.Detail != "the client key cannot be stored" || strings.Contains(w.Body.String(), key) {
					t.Fatalf("400 body %q: want the fixed message, never the key", w.Body.String())
				}
			}
			if n := st.Calls(); n != 0 {
				t.Errorf("%d store calls for a key the store cannot hold, want 0", n)
			}
			if s := mw.Stats(); s.BadKey != 5 || s.FailedOpen != 0 || s.Allowed != 0 {
				t.Errorf("stats %+v", s)
			}
			if errs := hook.all(); len(errs) != 5 || !errors.Is(errs[0], core.ErrInvalidKey) {
				t.Errorf("hook got %v, want the backend's ErrInvalidKey errors", errs)
			}
			// the edge of the rule is served
			if w := getKey(h, strings.ToValidUTF8(key[:min(len(key), ruleLen)], "")); w.Code != 200 {
				t.Errorf("a key within the rule: status %d", w.Code)
			}
			// WithFitKeys: the same key is limited exactly, on its own bucket
			fit := New(NewManaged(bucketgrid.NewManager(cas.New(st), bucketgrid.WithFitKeys(ruleLen)), StaticPlan(cfg)),
				WithKey(rawKey), WithTimeout(0)).Handler(ok)
			codes := []int{getKey(fit, key).Code, getKey(fit, key).Code, getKey(fit, key).Code}
			if codes[0] != 200 || codes[1] != 200 || codes[2] != 429 {
				t.Errorf("WithFitKeys: statuses %v, want 200 200 429", codes)
			}
		})
	}
}

// TestKeyErrorTextNeverEchoed: the 400 for a KeyFunc error carries a fixed
// message; the error itself (here leaking a database address) goes to the
// hook only.
func TestKeyErrorTextNeverEchoed(t *testing.T) {
	leak := errors.New("lookup api key: dial tcp 10.0.0.5:5432: connection refused")
	var hook hookErrs
	mw := New(NewLocal(StaticPlan(config(t, core.Greedy(1, 1, time.Second)))),
		WithKey(func(*http.Request) (string, error) { return "", leak }), WithErrorHook(hook.hook))
	w := get(mw.Handler(ok), "198.51.100.1:1", "/")
	checkProblem(t, w, 400)
	if strings.Contains(w.Body.String(), "10.0.0.5") {
		t.Fatalf("400 body echoes the KeyFunc's error: %s", w.Body.String())
	}
	if errs := hook.all(); len(errs) != 1 || errs[0] != leak {
		t.Fatalf("hook got %v, want the KeyFunc's error", errs)
	}
	for _, tt := range []struct {
		key  KeyFunc
		want string
	}{
		{HeaderKey("X-Api-Key", nil), "the request carries no client key"},
		{ClientIP{}.Key, "the client address is not an IP address"},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "@"
		w := httptest.NewRecorder()
		New(NewLocal(StaticPlan(config(t, core.Greedy(1, 1, time.Second)))), WithKey(tt.key)).Handler(ok).ServeHTTP(w, r)
		if p := checkProblem(t, w, 400); p.Detail != tt.want {
			t.Errorf("detail %q, want %q", p.Detail, tt.want)
		}
	}
}

// TestPlanRefusingKeyIs400: a Plan that does not know a key (an unknown API
// key) refuses it with ErrInvalidKey: 400, not an outage.
func TestPlanRefusingKeyIs400(t *testing.T) {
	plan := func(key string) (core.Config, error) { return core.Config{}, core.InvalidKey(key, "unknown API key") }
	mw := New(NewManaged(bucketgrid.NewManager(cas.New(memstore.New())), plan), WithFailOpen(true), WithTimeout(10*time.Second))
	if w := get(mw.Handler(ok), "198.51.100.1:1", "/"); w.Code != 400 {
		t.Fatalf("status %d, want 400", w.Code)
	}
	if s := mw.Stats(); s.BadKey != 1 || s.FailedOpen != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// corruptStore reads corrupt bytes for one key, whatever was written.
type corruptStore struct {
	cas.Store // the base SPI only: memstore's Writer and Batcher would bypass the overrides
	key       string
}

func (s corruptStore) Get(ctx context.Context, k string) ([]byte, cas.Version, bool, error) {
	data, ver, found, err := s.Store.Get(ctx, k)
	if k == s.key && err == nil {
		return []byte("garbage"), ver, true, nil
	}
	return data, ver, found, err
}

// noQuorumExecutor answers as a grid member on the minority side of a split
// does with a quorum set.
type noQuorumExecutor struct{}

func (noQuorumExecutor) Execute(context.Context, string, wire.Request) (wire.Response, error) {
	return wire.Response{}, fmt.Errorf("grid: %w", bucketgrid.ErrNoQuorum)
}
func (noQuorumExecutor) Remove(context.Context, string) error { return nil }

// alwaysLoses loses every race it can.
type alwaysLoses struct{ cas.Store }

func (alwaysLoses) Replace(context.Context, string, []byte, cas.Version, time.Duration) (bool, error) {
	return false, nil
}

// TestFailuresThatAreNotOutagesNeverFailOpen: errors no retry cures are
// refused with 503 even under fail-open.
func TestFailuresThatAreNotOutagesNeverFailOpen(t *testing.T) {
	cfg := config(t, core.Greedy(2, 2, time.Hour))
	key := "198.51.100.1"
	conflicted := alwaysLoses{memstore.New()}
	if _, err := bucketgrid.NewManager(cas.New(conflicted)).Bucket(key,
		func(context.Context) (core.Config, error) { return cfg, nil }).TryConsume(context.Background(), 1); err != nil {
		t.Fatal(err) // created by Insert, which never loses here
	}
	tests := []struct {
		name string
		src  Buckets
		want error
	}{
		{"corrupt record, RecoveryFail", NewManaged(bucketgrid.NewManager(cas.New(corruptStore{memstore.New(), key}),
			bucketgrid.WithRecoveryFail()), StaticPlan(cfg)), core.ErrCorruptState},
		{"plan gives an invalid configuration", NewManaged(bucketgrid.NewManager(cas.New(memstore.New())),
			StaticPlan(core.Config{})), core.ErrNoBandwidths},
		{"plan gives an invalid configuration (local)", NewLocal(StaticPlan(core.Config{})), core.ErrNoBandwidths},
		{"the executor gave up on a contended key", NewManaged(bucketgrid.NewManager(cas.New(conflicted,
			cas.WithRetry(retry.Immediate(5)))), StaticPlan(cfg)), cas.ErrConflict},
		{"a grid member without a quorum", NewManaged(bucketgrid.NewManager(noQuorumExecutor{}), StaticPlan(cfg)), bucketgrid.ErrNoQuorum},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var hook hookErrs
			mw := New(tt.src, WithFailOpen(true), WithErrorHook(hook.hook), WithTimeout(10*time.Second))
			h := mw.Handler(ok)
			for range 10 {
				if w := get(h, key+":1", "/"); w.Code != 503 {
					t.Fatalf("status %d, want 503 whatever the failure mode", w.Code)
				}
			}
			if s := mw.Stats(); s.FailedClosed != 10 || s.FailedOpen != 0 {
				t.Errorf("stats %+v", s)
			}
			if errs := hook.all(); len(errs) != 10 || !errors.Is(errs[0], tt.want) {
				t.Errorf("hook got %v, want %v", errs, tt.want)
			}
		})
	}
}

// quiet is a logger that discards, for Managers whose replacements of
// corrupt records the tests count instead.
var quiet = bucketgrid.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))

// TestCorruptRecordReconstructedBehindMiddleware: a
// corrupt record under a 2-per-hour limit, no longer serves 50 of 50: under
// the default recovery the record is replaced and 2 are served.
func TestCorruptRecordReconstructedBehindMiddleware(t *testing.T) {
	st := memstore.New()
	if ok, err := st.Insert(context.Background(), "198.51.100.1", []byte("garbage"), 0); !ok || err != nil {
		t.Fatal(ok, err)
	}
	m := bucketgrid.NewManager(cas.New(st), quiet)
	mw := New(NewManaged(m, StaticPlan(config(t, core.Intervally(2, 2, time.Hour)))), WithFailOpen(true), WithTimeout(10*time.Second))
	h := mw.Handler(ok)
	for range 50 {
		get(h, "198.51.100.1:1", "/")
	}
	if s := mw.Stats(); s.Allowed != 2 || s.Limited != 48 || s.FailedOpen != 0 {
		t.Fatalf("stats %+v, want 2 allowed and 48 limited", s)
	}
	if n := m.Stats().CorruptReplaced; n != 1 {
		t.Fatalf("CorruptReplaced = %d, want 1", n)
	}
}

// panicStore panics in Get for one key while armed.
type panicStore struct {
	cas.Store // the base SPI only: memstore's Writer and Batcher would bypass the overrides
	key       string
	armed     atomic.Bool
}

func (s *panicStore) Get(ctx context.Context, k string) ([]byte, cas.Version, bool, error) {
	if k == s.key && s.armed.Load() {
		panic("panicStore: " + k)
	}
	return s.Store.Get(ctx, k)
}

// serve runs h on a real server whose panics net/http recovers (quietly),
// as in production. Its client opens a connection per request: net/http
// resends a GET whose reused connection drops, which would count a panic
// twice.
func serve(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Start()
	srv.Client().Transport.(*http.Transport).DisableKeepAlives = true
	t.Cleanup(srv.Close)
	return srv
}

// fetch sends a request with X-Key and returns the status, or 0 when the
// connection was dropped (a panic re-raised in the handler).
func fetch(t *testing.T, srv *httptest.Server, key string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", srv.URL+"/", nil)
	req.Header.Set("X-Key", key)
	resp, err := srv.Client().Do(req)
	if err != nil {
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestPanicIsReRaisedNeverServed: a panic in the store, the executor or the
// plan is counted, reported with its stack, and re-raised on the handler's
// goroutine (net/http drops the connection): never served, never a crash of
// the process, and the key is served again once the panic is gone.
func TestPanicIsReRaisedNeverServed(t *testing.T) {
	cfg := config(t, core.Intervally(3, 3, time.Hour))
	ps := &panicStore{Store: memstore.New(), key: "boom"}
	ps.armed.Store(true)
	panicPlan := func(key string) (core.Config, error) {
		if key == "boom" {
			panic("plan: " + key)
		}
		return cfg, nil
	}
	tests := []struct {
		name  string
		src   Buckets
		stack string // a frame the reported stack must hold
	}{
		{"store, managed", NewManaged(bucketgrid.NewManager(cas.New(ps)), StaticPlan(cfg)), "panicStore"},
		{"plan, managed", NewManaged(bucketgrid.NewManager(cas.New(memstore.New())), panicPlan), "TestPanicIsReRaisedNeverServed"},
		{"plan, local", NewLocal(panicPlan), "TestPanicIsReRaisedNeverServed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var hook hookErrs
			var served atomic.Int64
			mw := New(tt.src, WithKey(rawKey), WithFailOpen(true), WithErrorHook(hook.hook), WithTimeout(10*time.Second))
			srv := serve(t, mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served.Add(1) })))
			for range 3 {
				if code := fetch(t, srv, "boom"); code != 0 {
					t.Fatalf("status %d, want the connection dropped", code)
				}
			}
			if served.Load() != 0 {
				t.Fatalf("a request whose limiter panicked was served")
			}
			for i := range 4 {
				if code, want := fetch(t, srv, "calm"), []int{200, 200, 200, 429}[i]; code != want {
					t.Fatalf("another client, request %d: status %d, want %d", i+1, code, want)
				}
			}
			if s := mw.Stats(); s.Panicked != 3 || s.FailedOpen != 0 || s.Allowed != 3 || s.Limited != 1 {
				t.Errorf("stats %+v", s)
			}
			errs := hook.all()
			var p *cas.PanicError
			if len(errs) != 3 || !errors.As(errs[0], &p) || !strings.Contains(fmt.Sprint(p.Value), "boom") ||
				!strings.Contains(string(p.Stack), tt.stack) {
				t.Fatalf("hook got %v, want 3 *cas.PanicError with the value and a stack through %s", errs, tt.stack)
			}
		})
	}
	// the store's key is not stuck once the store behaves again
	ps.armed.Store(false)
	mw := New(tests[0].src, WithKey(rawKey), WithTimeout(10*time.Second))
	if code := fetch(t, serve(t, mw.Handler(ok)), "boom"); code != 200 {
		t.Fatalf("after the panics: status %d, want 200", code)
	}
}

// TestIPv6ClientsKeyedBySlash64: one host rotating through the addresses of
// its /64 gets one bucket (1,000 addresses used to be 1,000 buckets).
func TestIPv6ClientsKeyedBySlash64(t *testing.T) {
	mw := New(NewLocal(StaticPlan(config(t, core.Intervally(5, 5, time.Minute))), WithClock(clock.NewFake(t0))))
	h := mw.Handler(ok)
	for i := range 1000 {
		get(h, fmt.Sprintf("[2001:db8:1:2:%x:%x::1]:443", i>>8, i&0xff), "/")
	}
	if s := mw.Stats(); s.Allowed != 5 {
		t.Fatalf("%d of 1000 requests from one /64 served, want 5", s.Allowed)
	}
}

// TestManagedBucketsExpireByDefault: NewManaged over a Manager built without
// WithExpiration no longer keeps every client's bucket forever.
func TestManagedBucketsExpireByDefault(t *testing.T) {
	clk := clock.NewFake(t0)
	st := memstore.New(memstore.WithClock(clk))
	mw := New(NewManaged(bucketgrid.NewManager(cas.New(st, cas.WithClock(clk))),
		StaticPlan(config(t, core.Greedy(10, 10, time.Minute))), WithClock(clk)), WithTimeout(0))
	h := mw.Handler(ok)
	for i := range 2000 {
		get(h, fmt.Sprintf("198.51.%d.%d:1", i>>8, i&0xff), "/")
	}
	if n := st.Len(); n != 2000 {
		t.Fatalf("%d buckets stored, want 2000", n)
	}
	clk.Advance(6*time.Second + time.Minute) // one token refills in 6 s
	if n := st.Len(); n != 0 {
		t.Fatalf("%d idle buckets kept past refill plus margin, want 0", n)
	}
}
