package quota

import (
	"fmt"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// perTenantRules gives every tenant value its own grid bucket.
const perTenantRules = `
domain: fleet
descriptors:
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: 1000, algorithm: token_bucket}
`

// tenantID is the bucket id of tenant n; all cost the same.
func tenantID(n int) map[string]string { return map[string]string{"tenant": fmt.Sprintf("t%07d", n)} }

// tableOf is a MaxTrackedBytes of n buckets of tenantID's size.
func tableOf(n int) int64 {
	return int64(n) * subCost(canonical(&rlqspb.BucketId{Bucket: tenantID(0)}))
}

// flood sends one report on r naming count new ids from *next on, each
// used (one request), and the last 100 ids it named before again as used.
func flood(r *rawStream, named *[]map[string]string, next *int, count int, elapsed time.Duration) {
	var us []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage
	for _, id := range (*named)[max(0, len(*named)-100):] {
		us = append(us, usageOf(id, 1, 0, elapsed))
	}
	for range count {
		id := tenantID(*next)
		*next++
		*named = append(*named, id)
		us = append(us, usageOf(id, 1, 0, 0))
	}
	r.send(reportOf(us...))
}

// TestFullTableAdmitsNewcomers: clients that fill the server's table with
// buckets they keep using cannot lock other Envoys out: an Envoy that
// arrives when the table is full gets a token bucket for its new id, and
// keeps it while ten streams go on naming new ids, every one used, for
// a minute; the flooders lose their own buckets instead, and the
// table stays within MaxTrackedBytes.
func TestFullTableAdmitsNewcomers(t *testing.T) {
	const slots = 40
	f := newFleet(t, perTenantRules, Options{MaxTrackedBytes: tableOf(slots)})
	var floods []*rawStream
	named := make([][]map[string]string, 10)
	next := 0
	for i := range 10 {
		floods = append(floods, f.raw())
		flood(floods[i], &named[i], &next, 2*slots, 0)
		f.settle()
	}
	if s := f.srv.Stats(); s.Buckets < slots-1 || s.TrackedBytes > tableOf(slots) {
		t.Fatalf("after the flood %d buckets tracked (%d bytes of %d), want the table full", s.Buckets, s.TrackedBytes, tableOf(slots))
	}

	honest := f.envoy("fleet")
	mine := tenantID(-1)
	honest.decide(mine)
	f.settle()
	s, known := honest.assignment(mine)
	if !known || s.GetTokenBucket() == nil {
		t.Fatalf("an Envoy's new id when the table is full is answered %v, want a token bucket", s)
	}
	for round := range 12 { // a minute of reports, ten new ids per stream each
		f.clk.Advance(envoyReportInterval)
		for i, r := range floods {
			flood(r, &named[i], &next, 10, envoyReportInterval)
		}
		honest.decide(mine)
		f.step(0)
		if s, _ := honest.assignment(mine); s.GetTokenBucket() == nil {
			t.Fatalf("round %d: the Envoy's bucket is answered %v, want its token bucket kept", round, s)
		}
		if st := f.srv.Stats(); st.TrackedBytes > tableOf(slots) {
			t.Fatalf("round %d: %d bytes tracked, above the table's %d", round, st.TrackedBytes, tableOf(slots))
		}
	}
	st := f.srv.Stats()
	if st.Evicted.Largest == 0 {
		t.Fatalf("no bucket evicted from the largest stream (%+v)", st.Evicted)
	}
	t.Logf("%d ids named; %d tracked, evicted %+v, refused %+v", next, st.Buckets, st.Evicted, st.Refused)
}

// TestEvictionCannotPushAStreamBelowTheOthers: a stream's bucket is taken
// only for a stream that holds less once the new id is in, so a flooder
// that opens stream after stream takes nothing from a stream holding an
// even share, and a stream evicted answers its evicted ids DENY_ALL.
func TestEvictionCannotPushAStreamBelowTheOthers(t *testing.T) {
	const slots = 12
	f := newFleet(t, perTenantRules, Options{MaxTrackedBytes: tableOf(slots)})
	big := f.raw()
	var bigIDs []map[string]string
	next := 0
	flood(big, &bigIDs, &next, slots, 0)
	f.settle()
	small := f.raw()
	var smallIDs []map[string]string
	flood(small, &smallIDs, &next, 3, 0)
	f.settle()
	// the small stream took three of the big one's: its least recently used
	denied := 0
	for _, a := range big.actions() {
		if r := a.GetQuotaAssignmentAction().GetRateLimitStrategy(); isBlanket(r) && r.GetBlanketRule() == typev3.RateLimitStrategy_DENY_ALL {
			denied++
		}
	}
	if denied != 3 {
		t.Fatalf("the big stream got %d DENY_ALL, want 3 (the buckets the small one took)", denied)
	}
	for _, a := range small.actions() {
		if a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket() == nil {
			t.Fatalf("the small stream got %v, want token buckets", a)
		}
	}
	// three streams of four: a fourth stream, and a fifth, find no stream
	// holding more than they would
	mid := f.raw()
	var midIDs []map[string]string
	flood(mid, &midIDs, &next, 4, 0)
	f.settle()
	for range 2 {
		r := f.raw()
		var ids []map[string]string
		flood(r, &ids, &next, 4, 0)
		f.settle()
	}
	f.srv.mu.Lock()
	var held []int
	for st := range f.srv.streams {
		held = append(held, len(st.subs))
	}
	f.srv.mu.Unlock()
	for _, n := range held {
		if n < 2 {
			t.Fatalf("streams hold %v buckets of a table of %d: one pushed below the others", held, slots)
		}
	}
	t.Logf("streams hold %v", held)
}

// TestStreamLimitEvictsItsIdle: a stream at MaxBuckets makes room for a
// new id by giving up a bucket it has not used for two periods, never one
// in use (that would churn assignments, each costing its max_tokens).
func TestStreamLimitEvictsItsIdle(t *testing.T) {
	f := newFleet(t, perTenantRules, Options{MaxBuckets: 4})
	r := f.raw()
	var ids []map[string]string
	next := 0
	flood(r, &ids, &next, 4, 0)
	f.settle()
	r.actions()
	// a fifth while all are in use: refused
	var fifth []map[string]string
	flood(r, &fifth, &next, 1, 0)
	f.settle()
	if s := f.srv.Stats(); s.Refused.StreamLimit != 1 || s.Evicted.Idle != 0 {
		t.Fatalf("a fifth id while four are in use: refused %+v, evicted %+v; want it refused", s.Refused, s.Evicted)
	}
	r.actions()
	// two periods with the first id unused, the others used
	for range 2 {
		f.clk.Advance(envoyReportInterval)
		var us []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage
		for i, id := range ids {
			us = append(us, usageOf(id, uint64(min(i, 1)), 0, envoyReportInterval))
		}
		r.send(reportOf(us...))
		f.step(0)
	}
	r.actions()
	r.send(reportOf(usageOf(fifth[0], 1, 0, envoyReportInterval)))
	f.settle()
	acts := r.actions()
	var got []string
	for _, a := range acts {
		got = append(got, fmt.Sprintf("%v:%v", a.GetBucketId().GetBucket()["tenant"], a.GetQuotaAssignmentAction().GetRateLimitStrategy()))
	}
	if s := f.srv.Stats(); s.Evicted.Idle != 1 || len(acts) != 2 || acts[0].GetBucketId().GetBucket()["tenant"] != ids[0]["tenant"] ||
		acts[1].GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket() == nil {
		t.Fatalf("the fifth id again after the first went unused two periods: %v, evicted %+v; want the first denied and the fifth a token bucket", got, s.Evicted)
	}
}

// TestEvictedGhostIsPaid: a ghost evicted for a new id is charged with all
// its Envoy may still spend, so the fleet stays within the grid bucket
// while the Envoy that lost its stream spends its assignment to its expiry.
func TestEvictedGhostIsPaid(t *testing.T) {
	f := newFleet(t, tenantRules, Options{})
	deny := &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_DENY_ALL}}
	var loads []*load
	for range 5 {
		e := f.envoy("fleet")
		e.noAssign = deny // nothing admitted without an assignment: the bound is exact
		loads = append(loads, &load{e: e, rate: 60})
	}
	per := simulate(f, loads, 30*time.Second)
	f.srv.mu.Lock()
	f.srv.opts.MaxTrackedBytes = f.srv.tracked // the table full from now on
	f.srv.mu.Unlock()
	// the first Envoy loses the service (its reports fail), and spends its
	// token bucket until it expires
	e := loads[0].e
	e.breakStream()
	e.mu.Lock()
	e.timerOn = false
	e.mu.Unlock()
	waitStats(t, f.srv, "the ghost", func(s Stats) bool { return s.Ghosts == 1 })
	// what the ghost's Envoy may spend beyond what is paid: its supply up
	// to its assignment's expiry
	f.srv.mu.Lock()
	g := f.srv.anyGhost()
	p := g.pool
	owed := p.debt + mulDiv(g.g, g.sent+f.srv.ttl+f.srv.delivery-g.paid, f.srv.period, true)
	f.srv.mu.Unlock()
	r := f.raw()
	r.send(reportOf(usageOf(map[string]string{"other": "x"}, 1, 0, 0)))
	f.settle()
	if s := f.srv.Stats(); s.Evicted.Ghost != 1 || s.Ghosts != 0 {
		t.Fatalf("evicted %+v, %d ghosts; want the ghost evicted", s.Evicted, s.Ghosts)
	}
	f.srv.mu.Lock()
	debt := p.debt
	f.srv.mu.Unlock()
	if debt != owed || owed <= 0 {
		t.Fatalf("the pool owes %d after the eviction, want %d (its supply to expiry charged)", debt, owed)
	}
	per = append(per, simulate(f, loads, 30*time.Second)...)
	var run int64
	for i, v := range per {
		run += v
		if bound := 100 + 100*float64(i+1)*simStep.Seconds(); float64(run) > bound {
			t.Fatalf("%d admitted by %v, above the grid bucket's %v", run, time.Duration(i+1)*simStep, bound)
		}
	}
}
