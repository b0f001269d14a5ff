package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	rlqfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"gopkg.in/yaml.v2"

	// the typed configurations the README's filter uses, for protojson
	_ "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
)

// TestRLQSThroughTheServer: with -rlqs the instance answers a quota stream
// on its quota port (under whatever codec and limits the server installs),
// from the same rules and the same grid bucket as the RLS, and shuts down
// with the stream still open.
func TestRLQSThroughTheServer(t *testing.T) {
	dir := writeConfig(t, t.TempDir(), map[string]string{"q.yaml": `
domain: q
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: token_bucket}
`})
	in := startInstance(t, "-config", dir, "-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0", "-backend", "memory", "-rlqs", "-rlqs-addr", "127.0.0.1:0")
	conn, err := grpc.NewClient(in.rlqsAddr, grpc.WithTransportCredentials(insecureCreds()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := rlqspb.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id := &rlqspb.BucketId{Bucket: map[string]string{"k": "a"}}
	if err := st.Send(&rlqspb.RateLimitQuotaUsageReports{Domain: "q", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
		{BucketId: id, NumRequestsAllowed: 1}}}); err != nil {
		t.Fatal(err)
	}
	resp, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	acts := resp.GetBucketAction()
	if len(acts) != 1 || acts[0].GetBucketId().GetBucket()["k"] != "a" {
		t.Fatalf("answer %v, want one action for the bucket", resp)
	}
	qa := acts[0].GetQuotaAssignmentAction()
	tb := qa.GetRateLimitStrategy().GetTokenBucket()
	if tb == nil || qa.GetAssignmentTimeToLive().GetSeconds() != 10 || tb.GetFillInterval().GetSeconds() != 5 {
		t.Fatalf("assignment %v, want a token bucket refilled every 5s for 10s", qa)
	}
	// the assignment was paid from the bucket the RLS charges: its burst
	// of 10 is no longer there for an RLS client
	rq := req("q", "k", "a")
	rq.HitsAddend = 10
	r, err := client(t, in.grpcAddr).ShouldRateLimit(ctx, rq)
	if err != nil {
		t.Fatal(err)
	}
	if r.GetOverallCode() != rlspb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("RLS answered %v to 10 hits after the quota took the bucket's tokens, want OVER_LIMIT", r.GetOverallCode())
	}
	// and /metrics tells: one stream open, one report, one token bucket
	// sent, its tokens paid from the grid bucket
	m := metricValues(t, "http://"+in.httpAddr+"/metrics")
	for name, want := range map[string]float64{
		`bucketgrid_rlqs_streams_open`:                             1,
		`bucketgrid_rlqs_reports_total`:                            1,
		`bucketgrid_rlqs_buckets`:                                  1,
		`bucketgrid_rlqs_assignments_total{action="token_bucket"}`: 1,
		`bucketgrid_rlqs_assignments_total{action="allow_all"}`:    0,
	} {
		if got, ok := m[name]; !ok || got != want {
			t.Errorf("%s = %v (exported %v), want %v", name, got, ok, want)
		}
	}
	if paid := m["bucketgrid_rlqs_tokens_paid_total"]; paid < 10 {
		t.Errorf("%v tokens paid from the grid, want at least the assignment's 10", paid)
	}
}

// metricValues reads the text exposition at url: every series line's
// value by its name and labels as printed.
func metricValues(t *testing.T, url string) map[string]float64 {
	t.Helper()
	r, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		i := strings.LastIndexByte(line, ' ')
		if line == "" || line[0] == '#' || i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("exposition line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// readmeBlock returns the code block after marker in README.md.
func readmeBlock(t *testing.T, marker string) string {
	t.Helper()
	raw, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(raw), "<!-- "+marker+" -->\n```yaml\n")
	if !ok {
		t.Fatalf("README.md has no block %s", marker)
	}
	block, _, _ := strings.Cut(after, "```")
	return block
}

// TestRLQSReadmeExample checks the README's filter against Envoy's v3 API
// (go-control-plane's types and validation rules) and answers the bucket
// ids it builds with the README's rules through a running instance.
func TestRLQSReadmeExample(t *testing.T) {
	var doc any
	if err := yaml.Unmarshal([]byte(readmeBlock(t, "rlqs-filter")), &doc); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(jsonable(doc))
	if err != nil {
		t.Fatal(err)
	}
	var filters []json.RawMessage
	if err := json.Unmarshal(js, &filters); err != nil || len(filters) != 1 {
		t.Fatalf("want one http filter: %v", err)
	}
	var hf hcmv3.HttpFilter
	if err := protojson.Unmarshal(filters[0], &hf); err != nil {
		t.Fatalf("not an HttpFilter: %v", err)
	}
	if err := hf.ValidateAll(); err != nil {
		t.Fatalf("filter fails validation: %v", err)
	}
	var fc rlqfilterv3.RateLimitQuotaFilterConfig
	if err := hf.GetTypedConfig().UnmarshalTo(&fc); err != nil {
		t.Fatal(err)
	}
	var bs rlqfilterv3.RateLimitQuotaBucketSettings
	if err := fc.GetBucketMatchers().GetOnNoMatch().GetAction().GetTypedConfig().UnmarshalTo(&bs); err != nil {
		t.Fatal(err)
	}
	if err := bs.ValidateAll(); err != nil {
		t.Fatalf("bucket settings fail validation: %v", err)
	}
	keys := bs.GetBucketIdBuilder().GetBucketIdBuilder()
	if len(keys) != 1 || keys["api_key"] == nil {
		t.Fatalf("bucket id builder %v, want one api_key entry", keys)
	}

	dir := writeConfig(t, t.TempDir(), map[string]string{"api.yaml": readmeBlock(t, "rlqs-rules")})
	in := startInstance(t, "-config", dir, "-grpc-addr", "127.0.0.1:0", "-http-addr", "", "-backend", "memory", "-rlqs", "-rlqs-addr", "127.0.0.1:0")
	conn, err := grpc.NewClient(in.rlqsAddr, grpc.WithTransportCredentials(insecureCreds()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := rlqspb.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id := &rlqspb.BucketId{Bucket: map[string]string{"api_key": "k1"}}
	if err := st.Send(&rlqspb.RateLimitQuotaUsageReports{Domain: fc.GetDomain(),
		BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{{BucketId: id, NumRequestsAllowed: 1}}}); err != nil {
		t.Fatal(err)
	}
	resp, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	tb := resp.GetBucketAction()[0].GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket()
	if tb == nil || tb.GetTokensPerFill().GetValue() == 0 {
		t.Fatalf("the README's bucket was answered %v, want a token bucket", resp)
	}
}
