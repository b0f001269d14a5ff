package main

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

const rlqsPortRules = `
domain: api
descriptors:
  - key: api_key
    rate_limit: {unit: second, requests_per_unit: 100, algorithm: token_bucket}
`

// envoyReport is the periodic report of an Envoy holding n buckets, as its
// filter builds it (global_client_impl.cc, buildReports): every bucket of
// its cache in one message, each with its counts and time_elapsed.
func envoyReport(domain string, n int) *rlqspb.RateLimitQuotaUsageReports {
	r := &rlqspb.RateLimitQuotaUsageReports{Domain: domain}
	for i := range n {
		r.BucketQuotaUsages = append(r.BucketQuotaUsages, &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId:           &rlqspb.BucketId{Bucket: map[string]string{"api_key": fmt.Sprintf("%032x", i)}},
			NumRequestsAllowed: 12345, NumRequestsDenied: 678, TimeElapsed: durationpb.New(5 * time.Second)})
	}
	return r
}

func quotaStream(t *testing.T, addr string) (grpc.BidiStreamingClient[rlqspb.RateLimitQuotaUsageReports, rlqspb.RateLimitQuotaResponse], context.CancelFunc) {
	t.Helper()
	return quotaStreamFrom(t, addr, "127.0.0.1")
}

// fromAddr is the dial option connecting from the loopback address local
// (any of 127.0.0.0/8), so that a test can speak as several peers.
func fromAddr(local string) grpc.DialOption {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	return grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) { return d.DialContext(ctx, "tcp", a) })
}

// quotaStreamFrom opens a quota stream on a connection of its own from the
// loopback address local.
func quotaStreamFrom(t *testing.T, addr, local string) (grpc.BidiStreamingClient[rlqspb.RateLimitQuotaUsageReports, rlqspb.RateLimitQuotaResponse], context.CancelFunc) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecureCreds()), fromAddr(local),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	st, err := rlqspb.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	return st, cancel
}

// TestRLQSLargeEnvoyReport: an Envoy holding a stream's most buckets
// (10,000, ids of a 32-byte key) sends them all in one report of about
// 0.7 MiB, ten times -grpc-max-recv: the quota port takes it and answers
// every bucket, while a check on the gRPC port is still held to
// -grpc-max-recv (answered OVER_LIMIT) and read up to -grpc-max-read only
// (beyond it, gRPC refuses the call RESOURCE_EXHAUSTED itself).
func TestRLQSLargeEnvoyReport(t *testing.T) {
	dir := writeConfig(t, t.TempDir(), map[string]string{"api.yaml": rlqsPortRules})
	in := startInstance(t, "-config", dir, "-grpc-addr", "127.0.0.1:0", "-http-addr", "", "-backend", "memory",
		// a minute for the first report: the test weighs its size, and a
		// report of 590 KB under the race detector on a loaded machine took
		// longer than the default 3 s to arrive
		"-rlqs", "-rlqs-addr", "127.0.0.1:0", "-rlqs-first-report", "1m")
	// a domain without rules: every bucket is answered ALLOW_ALL, so the
	// test weighs the report, not 10,000 grid buckets
	rep := envoyReport("other", 10_000)
	size := proto.Size(rep)
	if size <= 64<<10 {
		t.Fatalf("a report of 10,000 buckets is %d bytes, want it beyond -grpc-max-recv's 64 KiB", size)
	}
	st, cancel := quotaStream(t, in.rlqsAddr)
	defer cancel()
	if err := st.Send(rep); err != nil {
		t.Fatal(err)
	}
	answered := map[string]bool{}
	for len(answered) < 10_000 {
		resp, err := st.Recv()
		if err != nil {
			t.Fatalf("the stream failed after %d of 10,000 buckets answered (report of %d bytes): %v", len(answered), size, err)
		}
		for _, a := range resp.GetBucketAction() {
			answered[a.GetBucketId().GetBucket()["api_key"]] = true
		}
	}
	t.Logf("a report of 10,000 buckets (%d bytes) answered in full", size)

	// the check path keeps its own, smaller bounds
	rq := req("api", "api_key", strings.Repeat("x", 100<<10))
	if resp, err := call(client(t, in.grpcAddr), rq); err != nil || resp.OverallCode != rlspb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("a 100 KiB check on the gRPC port: %v %v, want OVER_LIMIT (-grpc-max-recv)", resp, err)
	}
	rq = req("api", "api_key", strings.Repeat("x", 300<<10))
	if _, err := call(client(t, in.grpcAddr), rq); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a 300 KiB check on the gRPC port: %v, want ResourceExhausted (-grpc-max-read)", err)
	}
}

// TestRLQSStreamsHaveTheirOwnBudget: quota streams hold their worst case
// for as long as they are open, from -rlqs-max-inflight-bytes: once it is
// full a further stream is refused RESOURCE_EXHAUSTED, and checks, whose
// room is -max-inflight-bytes, are still answered.
func TestRLQSStreamsHaveTheirOwnBudget(t *testing.T) {
	dir := writeConfig(t, t.TempDir(), map[string]string{"api.yaml": rlqsPortRules})
	const perStream = 64<<10 + 1<<20 // -grpc-window plus -rlqs-max-recv
	in := startInstance(t, "-config", dir, "-grpc-addr", "127.0.0.1:0", "-http-addr", "", "-backend", "memory",
		"-rlqs", "-rlqs-addr", "127.0.0.1:0", "-rlqs-max-recv", fmt.Sprint(1<<20),
		"-rlqs-max-inflight-bytes", fmt.Sprint(3*perStream), "-max-inflight-bytes", fmt.Sprint(perStream))
	for i := range 3 { // three Envoys, each from an address of its own
		st, cancel := quotaStreamFrom(t, in.rlqsAddr, fmt.Sprintf("127.0.0.%d", 1+i))
		defer cancel()
		if err := st.Send(envoyReport("api", 1)); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); err != nil {
			t.Fatalf("stream %d within the budget: %v", i, err)
		}
	}
	st, cancel := quotaStreamFrom(t, in.rlqsAddr, "127.0.0.4")
	defer cancel()
	st.Send(envoyReport("api", 1))
	if _, err := st.Recv(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a fourth stream beyond the quota budget: %v, want ResourceExhausted", err)
	}
	r, err := call(client(t, in.grpcAddr), req("api", "api_key", "k"))
	if err != nil || r.GetOverallCode() != 1 { // OK
		t.Fatalf("a check while the quota budget is full: %v, %v; want OK", r, err)
	}
}

// TestSilentQuotaStreamsLockNoEnvoyOut: a client opens quota streams that
// never send a report, and health Watch streams, on the quota port, from
// one address over several connections, until the port refuses them. A
// new Envoy from another address still gets its stream and its answer; a
// silent stream is closed (3 s without a report), and every refusal shows
// in /metrics. Before, 252 silent streams held the whole
// quota budget (1 GiB), none was closed, and every new Envoy was refused
// RESOURCE_EXHAUSTED until the client let go; Watch streams could take it
// all as well.
func TestSilentQuotaStreamsLockNoEnvoyOut(t *testing.T) {
	dir := writeConfig(t, t.TempDir(), map[string]string{"api.yaml": rlqsPortRules})
	const perStream = 64<<10 + 1<<20 // -grpc-window plus -rlqs-max-recv
	const room = 16                  // streams the quota budget holds
	in := startInstance(t, "-config", dir, "-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0", "-backend", "memory",
		"-rlqs", "-rlqs-addr", "127.0.0.1:0", "-rlqs-max-recv", fmt.Sprint(1<<20),
		"-rlqs-max-inflight-bytes", fmt.Sprint(room*perStream))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// The attacker: 2×room silent quota streams and 2×room Watch streams
	// over 4 connections of one address.
	var mu sync.Mutex
	ends := map[codes.Code]int{}
	var conns []*grpc.ClientConn
	for range 4 {
		cc, err := grpc.NewClient(in.rlqsAddr, grpc.WithTransportCredentials(insecureCreds()), fromAddr("127.0.0.1"))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		conns = append(conns, cc)
	}
	var wg sync.WaitGroup
	for i := range 4 * room {
		cc := conns[i%4]
		wg.Go(func() {
			var err error
			if i%2 == 0 {
				var st grpc.BidiStreamingClient[rlqspb.RateLimitQuotaUsageReports, rlqspb.RateLimitQuotaResponse]
				if st, err = rlqspb.NewRateLimitQuotaServiceClient(cc).StreamRateLimitQuotas(ctx); err == nil {
					_, err = st.Recv() // never reports: ends when the server ends it
				}
			} else {
				var w healthpb.Health_WatchClient
				if w, err = healthpb.NewHealthClient(cc).Watch(ctx, &healthpb.HealthCheckRequest{}); err == nil {
					for err == nil {
						_, err = w.Recv()
					}
				}
			}
			mu.Lock()
			ends[status.Code(err)]++
			mu.Unlock()
		})
	}
	refused := func() int {
		mu.Lock()
		defer mu.Unlock()
		return ends[codes.ResourceExhausted]
	}
	for refused() < 2*room { // at least half the attacker's streams found no room
		if ctx.Err() != nil {
			t.Fatalf("%d of the attacker's %d streams refused", refused(), 4*room)
		}
		time.Sleep(10 * time.Millisecond)
	}

	// A new Envoy, from another address, gets its stream and its answer.
	st, stop := quotaStreamFrom(t, in.rlqsAddr, "127.0.0.2")
	defer stop()
	if err := st.Send(envoyReport("api", 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatalf("a new Envoy beside %d silent streams: %v, want its answer", refused(), err)
	}

	// A silent quota stream is closed by the server (Unavailable: Envoy
	// opens a new one at its next report). The attacker's may all have
	// been refused (its Watch streams may have come first), so one more,
	// from a third address, which finds room beside the others.
	quiet, stopQuiet := quotaStreamFrom(t, in.rlqsAddr, "127.0.0.3")
	defer stopQuiet()
	if _, err := quiet.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("a stream that never reports: %v, want closed Unavailable", err)
	}
	silent, _ := strconv.Atoi(metricLine(t, in, `bucketgrid_rlqs_streams_closed_total{reason="silent"}`))
	exhausted, _ := strconv.Atoi(metricLine(t, in, `bucketgrid_rls_budget_refusals_total{answer="resource_exhausted",budget="quota"}`))
	if silent < 1 || exhausted < 2*room {
		t.Fatalf("/metrics: %d silent streams closed, %d quota streams refused; want at least 1 and %d", silent, exhausted, 2*room)
	}
	cancel()
	wg.Wait() // ends is the attacker goroutines' until they are done
	t.Logf("attacker's streams: %v; /metrics: %d closed silent, %d refused", ends, silent, exhausted)
}

// TestPartialQuotaReportsTimeOut: quota streams whose first report never
// finishes (each sends as much of a 900 kB report as flow control lets
// through, and never the rest) are ended by the server, at
// -rlqs-first-report's 3 s. Before, 252 unfinished 3.8 MB reports pinned
// 1.04 GB of live heap for as long as their client liked.
func TestPartialQuotaReportsTimeOut(t *testing.T) {
	dir := writeConfig(t, t.TempDir(), map[string]string{"api.yaml": rlqsPortRules})
	in := startInstance(t, "-config", dir, "-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0", "-backend", "memory",
		"-rlqs", "-rlqs-addr", "127.0.0.1:0", "-rlqs-max-recv", fmt.Sprint(1<<20))
	const streams = 8
	accepted, ended := unfinishedCalls(t, in.rlqsAddr, rlqspb.RateLimitQuotaService_StreamRateLimitQuotas_FullMethodName,
		streams, 900_000, time.Minute)
	if ended != streams {
		t.Fatalf("%d of %d unfinished reports ended", ended, streams)
	}
	if silent := metricLine(t, in, `bucketgrid_rlqs_streams_closed_total{reason="silent"}`); silent != fmt.Sprint(streams) {
		t.Fatalf("/metrics counts %s streams closed silent, want %d", silent, streams)
	}
	t.Logf("%d unfinished reports (%d bytes accepted) ended by the server", streams, accepted)
}
