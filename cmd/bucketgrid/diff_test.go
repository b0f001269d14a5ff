package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// diffDomain is the configuration of the differential test, one copy per
// generation (GEN): a generation is a fresh set of counters on both sides,
// so an attempt spoiled by a window boundary can start over.
const diffDomain = `
domain: diff-GEN
descriptors:
  - key: client
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: client
    value: vip
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: path
    value: /api/*
    rate_limit: {unit: minute, requests_per_unit: 40}
  - key: path
    value: /api/admin
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: file
    value: f/*
    share_threshold: true
    rate_limit: {unit: second, requests_per_unit: 4}
  - key: user
    rate_limit: {unit: second, requests_per_unit: 4, name: per_user}
  - key: plan
    value: premium
    rate_limit: {unit: second, requests_per_unit: 6, replaces: [{name: per_user}]}
  - key: tenant
    descriptors:
      - key: user
        rate_limit: {unit: second, requests_per_unit: 2}
      - key: user
        value: admin
        rate_limit: {unlimited: true}
  - key: internal
    rate_limit: {unlimited: true, replaces: [{name: per_user}]}
  - key: blocked
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: day
    rate_limit: {unit: day, requests_per_unit: 7}
`

const diffOther = `
domain: other-GEN
descriptors:
  - key: client
    rate_limit: {unit: second, requests_per_unit: 2}
`

const diffGenerations = 6

func diffFiles() map[string]string {
	files := map[string]string{}
	for g := range diffGenerations {
		files[fmt.Sprintf("diff%d.yaml", g)] = strings.ReplaceAll(diffDomain, "GEN", fmt.Sprint(g))
		files[fmt.Sprintf("other%d.yaml", g)] = strings.ReplaceAll(diffOther, "GEN", fmt.Sprint(g))
	}
	return files
}

// scenario draws requests that exercise every feature the differential test
// compares: several domains, nested descriptors, exact values, wildcards,
// share_threshold, replaces, unlimited, a limit of 0, shadow mode, per-request
// and per-descriptor hits (0 included), overrides, unknown domains and keys.
type scenario struct{ rng *rand.Rand }

func entries(kv ...string) *rlcommon.RateLimitDescriptor {
	d := &rlcommon.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func (s *scenario) pick(vals ...string) string { return vals[s.rng.IntN(len(vals))] }

func (s *scenario) descriptor() *rlcommon.RateLimitDescriptor {
	var d *rlcommon.RateLimitDescriptor
	switch s.rng.IntN(14) {
	case 0, 1:
		d = entries("client", s.pick("a", "b", "vip", "c"))
	case 2:
		d = entries("path", s.pick("/api/x", "/api/y", "/api/admin", "/static/z", "/api/"))
	case 3:
		d = entries("file", s.pick("f/1", "f/2", "f/3", "g/1"))
	case 4:
		d = entries("user", s.pick("u1", "u2"))
	case 5:
		d = entries("plan", s.pick("premium", "free"))
	case 6:
		d = entries("tenant", s.pick("t1", "t2"), "user", s.pick("u1", "admin"))
	case 7:
		d = entries("tenant", "t1")
	case 8:
		d = entries("internal", "yes")
	case 9:
		d = entries("blocked", s.pick("x", "y"))
	case 10:
		d = entries("shadow", "s")
	case 11:
		d = entries("day", s.pick("d1", "d2"))
	case 12:
		d = entries("nothing", "here")
	default:
		d = entries("ov", s.pick("o1", "o2"))
		d.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 3, Unit: typev3.RateLimitUnit_SECOND}
	}
	if s.rng.IntN(5) == 0 {
		d.HitsAddend = wrapperspb.UInt64(uint64(s.rng.IntN(5))) // 0 checks without charging
	}
	return d
}

func (s *scenario) request(gen int) *rlspb.RateLimitRequest {
	domain := fmt.Sprintf("diff-%d", gen)
	switch s.rng.IntN(12) {
	case 0:
		return &rlspb.RateLimitRequest{Domain: fmt.Sprintf("other-%d", gen),
			Descriptors: []*rlcommon.RateLimitDescriptor{entries("client", s.pick("a", "b"))}}
	case 1:
		domain = "unknown-domain"
	}
	req := &rlspb.RateLimitRequest{Domain: domain}
	for range 1 + s.rng.IntN(3) {
		req.Descriptors = append(req.Descriptors, s.descriptor())
	}
	if s.rng.IntN(4) == 0 {
		req.HitsAddend = uint32(s.rng.IntN(4))
	}
	return req
}

// TestDifferential sends one request sequence to envoyproxy/ratelimit and to
// bucketgrid (fixed_window, the embedded grid) and wants the same overall
// code and, per descriptor, the same code, limit_remaining, current limit and
// duration_until_reset, for every request.
//
// Both services read the wall clock, and their windows are whole seconds. A
// request is compared only when both answered within the same second (taken
// before the first call and after the second); otherwise the two counted it
// in different windows, the attempt is abandoned and a new one starts on
// fresh counters (the next generation of domains). Requests are sent in the
// first 700 ms of a second, so an attempt fails only when one exchange takes
// over 300 ms. Both run with their defaults: no response headers.
func TestDifferential(t *testing.T) { differential(t, false) }

// TestDifferentialDropinSettings is TestDifferential with
// envoyproxy/ratelimit's STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT and
// LIMIT_RESPONSE_HEADERS_ENABLED (a header renamed) in the environment both
// services read: the same statuses, and the same response headers.
func TestDifferentialDropinSettings(t *testing.T) {
	t.Setenv("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true")
	t.Setenv("LIMIT_RESPONSE_HEADERS_ENABLED", "true")
	t.Setenv("LIMIT_REMAINING_HEADER", "X-Left")
	differential(t, true)
}

// differential compares the answers; withHeaders: both services add
// response headers to some.
func differential(t *testing.T, withHeaders bool) {
	files := diffFiles()
	p := startPeer(t, files)
	dir := writeConfig(t, t.TempDir(), files)
	bg := startInstance(t, "-config", dir, "-grpc-addr", "127.0.0.1:0", "-http-addr", "",
		"-grid-bind", fmt.Sprintf("127.0.0.1:%d", gridPort(t)))
	ref, got := client(t, p.grpcAddr), client(t, bg.grpcAddr)

	const steps = 400
	for gen := range diffGenerations {
		s := &scenario{rng: rand.New(rand.NewPCG(uint64(gen), 42))}
		compared, ok := 0, true
		over, codes := 0, map[rlspb.RateLimitResponse_Code]int{}
		seconds := map[int64]bool{}
		headed := 0
		for i := 0; i < steps && ok; i++ {
			req := s.request(gen)
			if i%100 == 99 {
				nextSecond() // let every per-second window reset at least this often
			}
			waitEarlyInSecond()
			t0 := time.Now()
			want, werr := call(ref, req)
			have, herr := call(got, req)
			t1 := time.Now()
			if t0.Unix() != t1.Unix() {
				t.Logf("generation %d: request %d straddled a second (%v to %v); starting over", gen, i, t0, t1)
				ok = false
				break
			}
			if (werr == nil) != (herr == nil) {
				t.Fatalf("request %d %v: envoyproxy/ratelimit error %v, bucketgrid error %v", i, req, werr, herr)
			}
			if werr == nil {
				if diff := compare(want, have); diff != "" {
					t.Fatalf("generation %d, request %d\n%v\n%s", gen, i, prototext(req), diff)
				}
				codes[want.OverallCode]++
				if len(want.ResponseHeadersToAdd) > 0 {
					headed++
				}
				for _, st := range want.Statuses {
					if st.Code == rlspb.RateLimitResponse_OVER_LIMIT {
						over++
					}
				}
			}
			seconds[t0.Unix()] = true
			compared++
		}
		if ok {
			t.Logf("generation %d: %d requests over %d windows of a second, every answer equal; overall %v, %d descriptors over the limit, %d answers with headers",
				gen, compared, len(seconds), codes, over, headed)
			if withHeaders != (headed > 0) {
				t.Fatalf("%d answers with response headers, want some: %v", headed, withHeaders)
			}
			// the sequence must have tested something
			if len(seconds) < 4 || over < steps/10 || codes[rlspb.RateLimitResponse_OK] < steps/10 {
				t.Fatalf("the sequence is too tame: %d windows, %d over, %v", len(seconds), over, codes)
			}
			return
		}
	}
	t.Fatalf("every one of %d attempts straddled a second: the machine is too slow for a 300 ms exchange", diffGenerations)
}

// nextSecond returns just after the next whole second.
func nextSecond() {
	time.Sleep(time.Second - time.Duration(time.Now().Nanosecond()) + time.Millisecond)
}

// waitEarlyInSecond returns in the first 700 ms of a second.
func waitEarlyInSecond() {
	if into := time.Duration(time.Now().Nanosecond()); into > 700*time.Millisecond {
		time.Sleep(time.Second - into + time.Millisecond)
	}
}

func call(c rlspb.RateLimitServiceClient, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.ShouldRateLimit(ctx, req)
}

func prototext(m proto.Message) string {
	b, _ := protojsonMarshal(m)
	return string(b)
}

// compare returns what differs between two answers, "" when nothing does.
func compare(want, got *rlspb.RateLimitResponse) string {
	var b strings.Builder
	if want.OverallCode != got.OverallCode {
		fmt.Fprintf(&b, "overall_code: envoyproxy/ratelimit %v, bucketgrid %v\n", want.OverallCode, got.OverallCode)
	}
	if len(want.Statuses) != len(got.Statuses) {
		fmt.Fprintf(&b, "%d statuses, bucketgrid %d\n", len(want.Statuses), len(got.Statuses))
		return b.String()
	}
	for i, w := range want.Statuses {
		g := got.Statuses[i]
		if w.Code != g.Code || w.LimitRemaining != g.LimitRemaining ||
			!proto.Equal(w.CurrentLimit, g.CurrentLimit) || !proto.Equal(w.DurationUntilReset, g.DurationUntilReset) {
			fmt.Fprintf(&b, "status %d:\n  envoyproxy/ratelimit %v\n  bucketgrid           %v\n", i, w, g)
		}
	}
	// Envoy adds response_headers_to_add by lower-cased name
	// (Http::LowerCaseString), in any order
	headers := func(hs []*corev3.HeaderValue) []string {
		var out []string
		for _, h := range hs {
			out = append(out, strings.ToLower(h.Key)+": "+h.Value)
		}
		slices.Sort(out)
		return out
	}
	if w, g := headers(want.ResponseHeadersToAdd), headers(got.ResponseHeadersToAdd); !slices.Equal(w, g) {
		fmt.Fprintf(&b, "response headers:\n  envoyproxy/ratelimit %q\n  bucketgrid           %q\n", w, g)
	}
	return b.String()
}

func protojsonMarshal(m proto.Message) ([]byte, error) { return protojson.Marshal(m) }
