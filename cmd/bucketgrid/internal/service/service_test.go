package service

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/cas/memstore"
	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/cmd/bucketgrid/internal/metrics"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/core/wire"
	"github.com/bucketgrid/bucketgrid/policy"
	"github.com/bucketgrid/bucketgrid/policy/rulefile"
)

const shopYAML = `
domain: shop
descriptors:
  - key: client
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: api
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: token_bucket, burst: 3}
  - key: quota
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: free
    rate_limit: {unlimited: true}
  - key: detail
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 100}
`

// fixedNow is 15 s into a minute.
var fixedNow = time.Date(2026, 12, 1, 12, 0, 45, 0, time.UTC)

func newService(t *testing.T, opts Options) *Service {
	t.Helper()
	cfg, err := rulefile.Load([]rulefile.File{{Name: "shop.yaml", Data: []byte(shopYAML)}}, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if opts.Manager == nil {
		c := clock.NewFake(fixedNow)
		opts.Manager = bucketgrid.NewManager(cas.New(memstore.New(memstore.WithClock(c)), cas.WithClock(c)))
	}
	if opts.Clock == nil {
		opts.Clock = clock.NewFake(fixedNow)
	}
	s := New(opts)
	s.SetConfig(cfg)
	return s
}

func req(domain string, kv ...string) *rlspb.RateLimitRequest {
	r := &rlspb.RateLimitRequest{Domain: domain}
	for i := 0; i+1 < len(kv); i += 2 {
		r.Descriptors = append(r.Descriptors, &rlcommon.RateLimitDescriptor{
			Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: kv[i], Value: kv[i+1]}}})
	}
	return r
}

func headerMap(hs []*corev3.HeaderValue) map[string]string {
	m := map[string]string{}
	for _, h := range hs {
		m[h.Key] = h.Value
	}
	return m
}

func TestShouldRateLimit(t *testing.T) {
	s := newService(t, Options{Headers: policy.IETFHeaders | policy.XRateLimitHeaders, RetryAfter: true})
	ctx := context.Background()
	var last *rlspb.RateLimitResponse
	for i, want := range []rlspb.RateLimitResponse_Code{rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OVER_LIMIT} {
		r, err := s.ShouldRateLimit(ctx, req("shop", "client", "a", "free", "x", "none", "y"))
		if err != nil {
			t.Fatal(err)
		}
		if r.OverallCode != want {
			t.Fatalf("request %d: %v, want %v", i, r.OverallCode, want)
		}
		last = r
	}
	st := last.Statuses
	if st[0].Code != rlspb.RateLimitResponse_OVER_LIMIT || st[0].CurrentLimit.GetRequestsPerUnit() != 2 ||
		st[0].DurationUntilReset.AsDuration() != 15*time.Second {
		t.Errorf("limited: %v", st[0])
	}
	if st[1].Code != rlspb.RateLimitResponse_OK || st[1].LimitRemaining != math.MaxUint32 || st[1].CurrentLimit != nil {
		t.Errorf("unlimited: %v", st[1])
	}
	if st[2].Code != rlspb.RateLimitResponse_OK || st[2].LimitRemaining != 0 || st[2].CurrentLimit != nil || st[2].DurationUntilReset != nil {
		t.Errorf("no limit: %v", st[2])
	}
	h := headerMap(last.ResponseHeadersToAdd)
	for k, v := range map[string]string{
		"ratelimit-policy": `"shop.client";q=2;w=60`, "ratelimit": `"shop.client";r=0;t=15`,
		"x-ratelimit-limit": "2", "x-ratelimit-remaining": "0", "x-ratelimit-reset": "15", "retry-after": "15",
	} {
		if h[k] != v {
			t.Errorf("header %s = %q, want %q (all: %v)", k, h[k], v, h)
		}
	}
}

func TestHeadersSeveralDescriptors(t *testing.T) {
	s := newService(t, Options{Headers: policy.IETFHeaders | policy.XRateLimitHeaders})
	r, err := s.ShouldRateLimit(context.Background(), req("shop", "client", "b", "api", "k"))
	if err != nil {
		t.Fatal(err)
	}
	h := headerMap(r.ResponseHeadersToAdd)
	if want := `"shop.client";q=2;w=60, "shop.api";q=3;w=36`; h["ratelimit-policy"] != want {
		t.Errorf("policy %q, want %q", h["ratelimit-policy"], want)
	}
	if want := `"shop.client";r=1;t=15, "shop.api";r=2;t=12`; h["ratelimit"] != want {
		t.Errorf("ratelimit %q, want %q", h["ratelimit"], want)
	}
	if h["x-ratelimit-remaining"] != "1" || h["x-ratelimit-limit"] != "2" {
		t.Errorf("x-ratelimit of the tightest: %v", h)
	}
	if _, ok := h["retry-after"]; ok {
		t.Error("retry-after on an admitted request")
	}
	s = newService(t, Options{})
	if r, _ := s.ShouldRateLimit(context.Background(), req("shop", "client", "b")); len(r.ResponseHeadersToAdd) != 0 {
		t.Errorf("headers without -headers: %v", r.ResponseHeadersToAdd)
	}
}

func TestModes(t *testing.T) {
	ctx := context.Background()
	t.Run("quota mode", func(t *testing.T) {
		s := newService(t, Options{})
		s.ShouldRateLimit(ctx, req("shop", "quota", "q"))
		r, err := s.ShouldRateLimit(ctx, req("shop", "quota", "q"))
		if err != nil {
			t.Fatal(err)
		}
		st := r.Statuses[0]
		if r.OverallCode != rlspb.RateLimitResponse_OK || st.Code != rlspb.RateLimitResponse_OK ||
			st.CurrentLimit == nil || st.DurationUntilReset != nil {
			t.Fatalf("quota violation: %v", r)
		}
	})
	t.Run("global shadow mode", func(t *testing.T) {
		m := metrics.New(10)
		s := newService(t, Options{GlobalShadowMode: true, Metrics: m})
		for range 3 {
			r, err := s.ShouldRateLimit(ctx, req("shop", "client", "c"))
			if err != nil || r.OverallCode != rlspb.RateLimitResponse_OK {
				t.Fatalf("%v %v", r, err)
			}
		}
		r, _ := s.ShouldRateLimit(ctx, req("shop", "client", "c"))
		if r.Statuses[0].Code != rlspb.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("the descriptor's own code stays over the limit: %v", r.Statuses[0])
		}
		if got := counter(t, m, "bucketgrid_rls_global_shadow_mode_total", nil); got != 2 {
			t.Fatalf("global shadow count %v, want 2", got)
		}
	})
	t.Run("global quota mode", func(t *testing.T) {
		s := newService(t, Options{GlobalQuotaMode: true})
		for range 3 {
			s.ShouldRateLimit(ctx, req("shop", "client", "d"))
		}
		r, _ := s.ShouldRateLimit(ctx, req("shop", "client", "d"))
		if r.OverallCode != rlspb.RateLimitResponse_OK || r.Statuses[0].Code != rlspb.RateLimitResponse_OK || r.Statuses[0].DurationUntilReset != nil {
			t.Fatalf("%v", r)
		}
	})
}

func TestErrors(t *testing.T) {
	ctx := context.Background()
	s := newService(t, Options{})
	many := &rlspb.RateLimitRequest{Domain: "shop", Descriptors: make([]*rlcommon.RateLimitDescriptor, policy.MaxDescriptors+1)}
	for _, tc := range []struct {
		name string
		s    *Service
		req  *rlspb.RateLimitRequest
		code codes.Code
	}{
		{"empty domain", s, req("", "client", "a"), codes.InvalidArgument},
		{"no descriptors", s, &rlspb.RateLimitRequest{Domain: "shop"}, codes.InvalidArgument},
		{"too many descriptors", s, many, codes.InvalidArgument},
		{"no configuration", New(Options{Manager: s.opts.Manager}), req("shop", "client", "a"), codes.Unavailable},
		{"backend down", newService(t, Options{Manager: bucketgrid.NewManager(brokenExecutor{})}), req("shop", "client", "a"), codes.Unavailable},
	} {
		_, err := tc.s.ShouldRateLimit(ctx, tc.req)
		if status.Code(err) != tc.code {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.code)
		}
	}
}

// TestClientValuesNeverOpenTheGate: a request that a client's own values
// make unusable is refused (OVER_LIMIT), not an error that Envoy's
// failure_mode_deny (false by default) would let through.
func TestClientValuesNeverOpenTheGate(t *testing.T) {
	ctx := context.Background()
	s := newService(t, Options{})
	big := req("shop", "client", strings.Repeat("x", policy.MaxDescriptorBytes))
	for _, tc := range []struct {
		name string
		s    *Service
		req  *rlspb.RateLimitRequest
	}{
		{"descriptor too large", s, big},
		{"key the backend cannot hold", newService(t, Options{Manager: bucketgrid.NewManager(keyRefusingExecutor{})}), req("shop", "client", "a")},
		// Not a client's value, but no outage either: a member on the
		// minority side of a split.
		{"no quorum", newService(t, Options{Manager: bucketgrid.NewManager(noQuorumExecutor{})}), req("shop", "client", "a")},
		// Nor a key so contended that every retry lost its race: a client
		// hammering its own key from many instances must not unlimit itself.
		{"contended key", newService(t, Options{Manager: bucketgrid.NewManager(conflictExecutor{})}), req("shop", "client", "a")},
	} {
		r, err := tc.s.ShouldRateLimit(ctx, tc.req)
		if err != nil {
			t.Errorf("%s: error %v, want an OVER_LIMIT answer", tc.name, err)
			continue
		}
		if r.OverallCode != rlspb.RateLimitResponse_OVER_LIMIT || len(r.Statuses) != len(tc.req.Descriptors) {
			t.Errorf("%s: %v, want OVER_LIMIT for each of %d descriptors", tc.name, r, len(tc.req.Descriptors))
			continue
		}
		for i, st := range r.Statuses {
			if st.Code != rlspb.RateLimitResponse_OVER_LIMIT {
				t.Errorf("%s: descriptor %d: %v, want OVER_LIMIT", tc.name, i, st.Code)
			}
		}
	}
}

// brokenExecutor fails every request, naming the key as a real store
// error might.
type brokenExecutor struct{}

func (brokenExecutor) Execute(_ context.Context, key string, _ wire.Request) (wire.Response, error) {
	return wire.Response{}, errors.New("store unreachable while reading " + key)
}
func (brokenExecutor) Remove(context.Context, string) error { return nil }

// noQuorumExecutor answers as a grid member without a quorum does.
type noQuorumExecutor struct{}

func (noQuorumExecutor) Execute(context.Context, string, wire.Request) (wire.Response, error) {
	return wire.Response{}, fmt.Errorf("grid: %w", bucketgrid.ErrNoQuorum)
}
func (noQuorumExecutor) Remove(context.Context, string) error { return nil }

// conflictExecutor answers as a CAS executor whose retries all lost.
type conflictExecutor struct{}

func (conflictExecutor) Execute(context.Context, string, wire.Request) (wire.Response, error) {
	return wire.Response{}, fmt.Errorf("x: %w", cas.ErrConflict)
}
func (conflictExecutor) Remove(context.Context, string) error { return nil }

// keyRefusingExecutor refuses every key, as a store with a shorter key
// limit than the service's keys would.
type keyRefusingExecutor struct{}

func (keyRefusingExecutor) Execute(_ context.Context, key string, _ wire.Request) (wire.Response, error) {
	return wire.Response{}, core.InvalidKey(key, "longer than 8 bytes")
}
func (keyRefusingExecutor) Remove(context.Context, string) error { return nil }

func TestBackendErrorsAreRedacted(t *testing.T) {
	var logs bytes.Buffer
	s := newService(t, Options{Manager: bucketgrid.NewManager(brokenExecutor{}), Logger: newLogger(&logs)})
	_, err := s.ShouldRateLimit(context.Background(), req("shop", "client", "secret-token-123"))
	if err == nil || strings.Contains(err.Error(), "secret-token-123") || strings.Contains(logs.String(), "secret-token-123") {
		t.Fatalf("a client value escaped: %v\n%s", err, logs.String())
	}
	if !strings.Contains(logs.String(), "key of shop.client") {
		t.Fatalf("the log does not say which rule: %s", logs.String())
	}
}

func TestJSON(t *testing.T) {
	s := newService(t, Options{})
	srv := httptest.NewServer(s.JSONHandler())
	defer srv.Close()
	post := func(body string) (int, string) {
		resp, err := http.Post(srv.URL, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	body := `{"domain":"shop","descriptors":[{"entries":[{"key":"client","value":"j"}]}]}`
	for i, want := range []int{200, 200, 429} {
		code, out := post(body)
		if code != want {
			t.Fatalf("request %d: %d %s, want %d", i, code, out, want)
		}
		var r rlspb.RateLimitResponse
		if err := protojson.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("answer is not a RateLimitResponse: %v: %s", err, out)
		}
	}
	for _, bad := range []string{`{`, `{"domain":""}`, `{"nope":1}`} {
		if code, out := post(bad); code != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", bad, code, out)
		}
	}
	resp, _ := http.Get(srv.URL)
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET: %d", resp.StatusCode)
	}
}
