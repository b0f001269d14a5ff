package quota

import (
	"context"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestAbandonIdle: a bucket an Envoy stops using is abandoned after
// IdleAfter; the Envoy forgets it and its next request subscribes again.
func TestAbandonIdle(t *testing.T) {
	f := newFleet(t, tenantRules, Options{IdleAfter: 20 * time.Second})
	e := f.envoy("fleet")
	free := map[string]string{"other": "x"} // a blanket bucket idles too
	e.decide(tenant)
	e.decide(free)
	f.settle()
	for range 3 {
		f.step(envoyReportInterval)
	}
	if s, known := e.assignment(tenant); !known || s.GetTokenBucket() == nil {
		t.Fatalf("before idling: %v, want a token bucket", s)
	}
	for range 2 {
		f.step(envoyReportInterval)
	}
	for _, id := range []map[string]string{tenant, free} {
		if _, known := e.assignment(id); known {
			t.Fatalf("bucket %v still cached 25 s after its only request, want it abandoned", id)
		}
	}
	f.srv.mu.Lock()
	pools := len(f.srv.pools)
	f.srv.mu.Unlock()
	reports := e.reportsSent.Load()
	if !e.decide(tenant) { // no_assignment_behavior: ALLOW_ALL
		t.Fatal("a re-subscribing request was refused under the default no_assignment_behavior")
	}
	f.settle()
	if e.reportsSent.Load() != reports+1 {
		t.Fatal("the request after an abandon sent no immediate report")
	}
	if s, known := e.assignment(tenant); !known || s.GetTokenBucket() == nil {
		t.Fatalf("after re-subscribing: %v, want a token bucket", s)
	}
	f.step(envoyReportInterval)
	f.srv.mu.Lock()
	defer f.srv.mu.Unlock()
	if pools > 1 {
		t.Fatalf("%d pools after the abandon, want the idle one gone", pools)
	}
}

// TestStreamBreak: an Envoy whose stream breaks keeps its assignment until
// it expires, and the server keeps paying for it (a ghost) meanwhile; the
// Envoy reopens the stream at its next report and subscribes again; the
// fleet stays within the bound throughout.
func TestStreamBreak(t *testing.T) {
	f := newFleet(t, tenantRules, Options{})
	var loads []*load
	for range 5 {
		loads = append(loads, &load{e: f.envoy("fleet"), rate: 60})
	}
	per := simulate(f, loads, 30*time.Second)
	loads[0].e.breakStream()
	// the server learns of the break when its stream's context ends, in a
	// goroutine of its own: wait for it, as an Envoy's next report would
	// find it anyway
	waitStats(t, f.srv, "the broken stream becomes a ghost", func(s Stats) bool { return s.Streams == 4 && s.Ghosts == 1 })
	per = append(per, simulate(f, loads, 2*time.Second)...)
	f.srv.mu.Lock()
	ghosts := 0
	for _, p := range f.srv.pools {
		for sb := range p.members {
			if sb.ghost {
				ghosts++
			}
		}
	}
	f.srv.mu.Unlock()
	if ghosts != 1 {
		t.Fatalf("%d ghosts after a stream broke, want 1", ghosts)
	}
	per = append(per, simulate(f, loads, 30*time.Second)...)
	f.srv.mu.Lock()
	members, ghosts := 0, 0
	for _, p := range f.srv.pools {
		for sb := range p.members {
			members++
			if sb.ghost {
				ghosts++
			}
		}
	}
	f.srv.mu.Unlock()
	if members != 5 || ghosts != 0 {
		t.Fatalf("%d members, %d ghosts 30 s after the break, want 5 and none", members, ghosts)
	}
	if s, _ := loads[0].e.assignment(tenant); s.GetTokenBucket() == nil {
		t.Fatalf("the reconnected Envoy holds %v, want a token bucket", s)
	}
	const w = 20 * time.Second
	if hi, _ := worst(per, 0, w); float64(hi) > fleetBound(100, 100, 6, w, f.srv.opts) {
		t.Fatalf("worst %v admitted %d, above the bound %v", w, hi, fleetBound(100, 100, 6, w, f.srv.opts))
	}
	var run int64
	for i, v := range per {
		run += v
		// 5 first requests under the default no_assignment_behavior, and
		// the reconnect's re-subscription answers at once
		if bound := 100 + 5 + 100*float64(i+1)*simStep.Seconds(); float64(run) > bound {
			t.Fatalf("%d admitted by %v, above the grid bucket's %v", run, time.Duration(i+1)*simStep, bound)
		}
	}
}

// TestExpiryFallback: without renewals an assignment expires after its TTL
// into expired_assignment_behavior's fallback for its timeout, then into
// no_assignment_behavior (the server sends whole-second TTLs Envoy reads).
func TestExpiryFallback(t *testing.T) {
	f := newFleet(t, tenantRules, Options{})
	e := f.envoy("fleet")
	deny := &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_DENY_ALL}}
	e.expired, e.expTTL = deny, 30*time.Second
	e.decide(tenant)
	f.settle()
	if s, _ := e.assignment(tenant); s.GetTokenBucket() == nil {
		t.Fatalf("assignment %v, want a token bucket", s)
	}
	f.clk.Advance(f.srv.opts.TTL) // no period runs: nothing is renewed
	if e.decide(tenant) {
		t.Fatal("admitted after the TTL, want the DENY_ALL fallback")
	}
	f.clk.Advance(30 * time.Second)
	if !e.decide(tenant) {
		t.Fatal("refused after the fallback's timeout, want no_assignment_behavior's ALLOW_ALL")
	}
}

const windowRules = `
domain: fleet
descriptors:
  - key: tenant
    value: shared
    rate_limit: {unit: minute, requests_per_unit: 600}
`

// TestFixedWindowFleet: on a fixed-window rule the fleet never takes a
// window's reserved tokens, and any minute admits at most the windows it
// overlaps hold, plus the Period and Delivery before it.
func TestFixedWindowFleet(t *testing.T) {
	f := newFleet(t, windowRules, Options{})
	// start on a minute boundary, so the windows are the simulation's minutes
	f.clk.Advance(time.Duration(60e9 - f.clk.Now()%60e9))
	f.start = f.clk.Now()
	var loads []*load
	for i := range 5 {
		loads = append(loads, &load{e: f.envoy("fleet"), rate: float64(20 + 5*i)})
	}
	per := simulate(f, loads, 5*time.Minute)
	o := f.srv.opts
	n := 600.0
	for m := range 5 {
		got := sum(per[m*int(time.Minute/simStep) : (m+1)*int(time.Minute/simStep)])
		// the window's n, what was paid from the window before and spent in
		// this one (Period + Delivery of the rate), the Envoys' buckets
		bound := n + n/60*(o.Period+o.Delivery).Seconds() + 5 + n/60*o.Burst.Seconds()
		if float64(got) > bound {
			t.Errorf("window %d admitted %d, above %v", m, got, bound)
		}
		if m > 0 && float64(got) < 0.9*n {
			t.Errorf("window %d admitted %d, under 90%% of %v", m, got, n)
		}
		t.Logf("window %d: %d of %v", m, got, n)
	}
}

// TestAbandonCrossingAReport: a periodic report sent before the Envoy saw
// an abandon re-creates the bucket on the server; the Envoy's own
// re-subscription (its immediate report, under a second since the
// bucket's creation) is still answered at once, and a bucket the Envoy no
// longer reports is dropped after two periods.
func TestAbandonCrossingAReport(t *testing.T) {
	f := newFleet(t, tenantRules, Options{})
	st := &stream{out: make(chan *rlqspb.RateLimitQuotaResponse, 64), subs: map[string]*sub{}}
	f.srv.mu.Lock()
	f.srv.streams[st] = struct{}{}
	f.srv.mu.Unlock()
	ctx := context.Background()
	usage := func(elapsed time.Duration) *rlqspb.RateLimitQuotaUsageReports {
		return &rlqspb.RateLimitQuotaUsageReports{Domain: "fleet", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
			{BucketId: &rlqspb.BucketId{Bucket: tenant}, NumRequestsAllowed: 1, TimeElapsed: durationpb.New(elapsed)}}}
	}
	next := func() *rlqspb.RateLimitQuotaResponse {
		t.Helper()
		select {
		case r := <-st.out:
			return r
		default:
			t.Fatal("no response queued")
			return nil
		}
	}
	f.srv.report(ctx, st, usage(0)) // the stale periodic report, seen as a subscription
	next()
	f.clk.Advance(time.Second)
	f.srv.report(ctx, st, usage(0)) // the Envoy's re-subscription
	if tb := next().GetBucketAction()[0].GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket(); tb == nil {
		t.Fatal("the re-subscription was not answered with a token bucket")
	}
	f.clk.Advance(5 * time.Second)
	f.srv.report(ctx, st, usage(5*time.Second)) // periodic: no immediate answer
	if len(st.out) != 0 {
		t.Fatal("a periodic report was answered at once")
	}
	for range 3 { // no more reports: the Envoy no longer holds it
		f.clk.Advance(5 * time.Second)
		f.srv.tick(ctx)
	}
	f.srv.mu.Lock()
	defer f.srv.mu.Unlock()
	if len(st.subs) != 0 {
		t.Fatalf("%d buckets kept 15 s after their last report, want none", len(st.subs))
	}
}

// TestQuietStreamsAreClosed: a stream that sends no report within
// FirstReport of its start, and one that sends none for StreamIdle after
// its last, are closed by the server with Unavailable (Envoy opens a new
// stream at its next report), and counted. A stream holds its room of the
// port's memory budget while it is open; before, a silent one held it
// forever.
func TestQuietStreamsAreClosed(t *testing.T) {
	f := newFleet(t, tenantRules, Options{FirstReport: 3 * time.Second, StreamIdle: 15 * time.Second})
	// armed waits until the server's handler of the one open stream has
	// armed its timer, so that the clock's steps count from its start.
	armed := func() {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for f.clk.Timers() != 1 {
			if time.Now().After(deadline) {
				t.Fatalf("%d stream timers waiting on the clock, want 1", f.clk.Timers())
			}
			time.Sleep(time.Millisecond)
		}
	}
	// closedWithin advances the clock by most, a second at a time, and
	// then waits (on the real clock, generously) for r to end: a server
	// that keeps r open past most fails.
	closedWithin := func(r *rawStream, most time.Duration) {
		t.Helper()
		for went := time.Duration(0); went < most; went += time.Second {
			f.clk.Advance(time.Second)
		}
		select {
		case err := <-r.ended:
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("the quiet stream ended with %v, want Unavailable", err)
			}
		case <-time.After(time.Minute):
			t.Fatalf("the quiet stream still open %v of the clock after its timer was armed", most)
		}
	}
	silent := f.raw()
	armed()
	closedWithin(silent, 4*time.Second) // FirstReport (3s) and a step
	quiet := f.raw()
	armed()
	quiet.send(reportOf(usageOf(tenant, 1, 0, 0)))
	f.settle()
	closedWithin(quiet, 16*time.Second) // StreamIdle (15s) after the report, and a step
	if s := f.srv.Stats(); s.Closed != (Closes{Silent: 1, Idle: 1}) {
		t.Fatalf("closed %+v, want one silent and one idle", s.Closed)
	}
}
