package quota

import (
	"fmt"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// The tests of this file send what a client chooses rather than what
// Envoy sends: the server's memory stays bounded and no choice of bytes
// makes it give more than a limit holds.

func usageOf(id map[string]string, allowed, denied uint64, elapsed time.Duration) *rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage {
	return &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{BucketId: &rlqspb.BucketId{Bucket: id},
		NumRequestsAllowed: allowed, NumRequestsDenied: denied, TimeElapsed: durationpb.New(elapsed)}
}

func reportOf(us ...*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage) *rlqspb.RateLimitQuotaUsageReports {
	return &rlqspb.RateLimitQuotaUsageReports{Domain: "fleet", BucketQuotaUsages: us}
}

// TestHostileUnknownFields: unknown fields a client adds to a bucket id are
// neither kept with the tracked bucket nor echoed in its answers.
func TestHostileUnknownFields(t *testing.T) {
	f := newFleet(t, tenantRules, Options{})
	r := f.raw()
	u := usageOf(tenant, 1, 0, 0)
	junk := protowire.AppendTag(nil, 999, protowire.BytesType)
	junk = protowire.AppendBytes(junk, make([]byte, 32<<10))
	u.BucketId.ProtoReflect().SetUnknown(junk)
	r.send(reportOf(u))
	f.settle()
	acts := r.actions()
	if len(acts) != 1 || acts[0].GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket() == nil {
		t.Fatalf("answer %v, want a token bucket", acts)
	}
	if n := proto.Size(acts[0].GetBucketId()); n > 64 {
		t.Fatalf("the answer's bucket id is %d bytes, want the entries only (the client's 32 KiB of unknown fields dropped)", n)
	}
	f.srv.mu.Lock()
	defer f.srv.mu.Unlock()
	for st := range f.srv.streams {
		for _, sb := range st.subs {
			if n := len(sb.id.ProtoReflect().GetUnknown()); n > 0 {
				t.Fatalf("the tracked bucket keeps %d bytes of unknown fields", n)
			}
		}
	}
}

// TestHostileHugeBucketIDs: ids beyond the RLS's bounds are answered
// DENY_ALL and not tracked, so a stream's MaxBuckets cannot hold
// MaxBuckets of the largest messages.
func TestHostileHugeBucketIDs(t *testing.T) {
	many := map[string]string{}
	for i := range 33 {
		many[fmt.Sprintf("k%02d", i)] = "v"
	}
	for _, c := range []struct {
		name string
		id   map[string]string
	}{
		{"33 entries", many},
		{"a 5000-byte value", map[string]string{"tenant": strings.Repeat("x", 5000)}},
		{"a 5000-byte key", map[string]string{strings.Repeat("k", 5000): "v"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFleet(t, tenantRules, Options{})
			r := f.raw()
			r.send(reportOf(usageOf(c.id, 1, 0, 0)))
			f.settle()
			acts := r.actions()
			if len(acts) != 1 || !isBlanket(acts[0].GetQuotaAssignmentAction().GetRateLimitStrategy()) ||
				acts[0].GetQuotaAssignmentAction().GetRateLimitStrategy().GetBlanketRule() == 0 {
				t.Fatalf("answer %v, want DENY_ALL", acts)
			}
			if s := f.srv.Stats(); s.Buckets != 0 || s.TrackedBytes != 0 || s.Refused.TooLarge != 1 {
				t.Fatalf("%d buckets tracked (%d bytes), %d refused as too large; want 0, 0, 1", s.Buckets, s.TrackedBytes, s.Refused.TooLarge)
			}
		})
	}
}

// TestTrackedBytesBound: streams subscribing ever more bucket ids stop
// being tracked at MaxTrackedBytes (DENY_ALL from then on, or an earlier
// stream's bucket evicted, counted), and
// the heap they hold is within that budget: subCost is an upper bound of
// what a tracked bucket costs, grid bucket and pool included.
func TestTrackedBytesBound(t *testing.T) {
	const budget = 24 << 20
	f := newFleet(t, `
domain: fleet
descriptors:
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: 1000, algorithm: token_bucket}
`, Options{MaxTrackedBytes: budget})
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	// small ids, each its own grid bucket: the overhead dominates; four
	// streams take turns, so that they fill the table side by side and
	// few buckets are evicted (an evicted one leaves its grid state to
	// the grid, whose own caches bound it)
	n := 0
	var raws []*rawStream
	for range 4 {
		raws = append(raws, f.raw())
	}
	for range 40 { // 40 reports of 250 new ids each: a stream's MaxBuckets
		for _, r := range raws {
			var us []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage
			for range 250 {
				us = append(us, usageOf(map[string]string{"tenant": fmt.Sprintf("t%07d", n)}, 1, 0, 0))
				n++
			}
			r.send(reportOf(us...))
			f.settle()
			r.actions()
		}
	}
	for _, r := range raws {
		r.actions()
	}
	s := f.srv.Stats()
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	held := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	if s.Refused.ServerLimit == 0 || s.TrackedBytes > budget || s.Buckets+int(s.Refused.ServerLimit+s.Evicted.Largest) != n ||
		s.Evicted.Largest > 1000 {
		t.Fatalf("%d ids sent: %d tracked (%d bytes of %d), %d refused at the budget, %d evicted", n, s.Buckets, s.TrackedBytes, budget,
			s.Refused.ServerLimit, s.Evicted.Largest)
	}
	t.Logf("%d buckets tracked (%d evicted), %d bytes counted, %d bytes of heap held (%.0f a bucket)", s.Buckets, s.Evicted.Largest, s.TrackedBytes, held, float64(held)/float64(s.Buckets))
	if held > s.TrackedBytes {
		t.Fatalf("%d bytes of heap held for %d buckets counted as %d: subCost is below what a bucket costs", held, s.Buckets, s.TrackedBytes)
	}
}

// TestHostileAbsurdNumbers: a stream that reports 2^64 requests a period
// for a shared bucket takes no more of the limit than one that truly
// wants all of it: an honest Envoy asking three times the limit keeps
// about half, and nothing wraps around.
func TestHostileAbsurdNumbers(t *testing.T) {
	f := newFleet(t, tenantRules, Options{})
	r := f.raw()
	r.send(reportOf(usageOf(tenant, math.MaxUint64, math.MaxUint64, 0)))
	honest := &load{e: f.envoy("fleet"), rate: 300}
	var admitted int64
	for i := range 12 {
		r.send(reportOf(usageOf(tenant, math.MaxUint64, math.MaxUint64, 5*time.Second)))
		simulate(f, []*load{honest}, envoyReportInterval)
		if i >= 4 {
			admitted += sum(honest.admitted)
		}
	}
	got := float64(admitted) / (8 * envoyReportInterval.Seconds())
	for _, a := range r.actions() {
		if g := a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket().GetTokensPerFill().GetValue(); g > 500 {
			t.Fatalf("the claimant was assigned %d tokens a period, above the rule's 500", g)
		}
	}
	if got < 40 {
		t.Fatalf("the honest Envoy admitted %.1f/s of a 100/s limit beside a claim of 2^64 requests, want about half", got)
	}
	t.Logf("the honest Envoy admitted %.1f/s", got)
}

// TestHostileRecreation: a client that re-reports a bucket as just
// created (time_elapsed 0) over and over, or names it many times in one
// report, gets at most one new assignment a period: each costs its
// max_tokens from the grid bucket, which the others would lose.
func TestHostileRecreation(t *testing.T) {
	f := newFleet(t, tenantRules, Options{})
	r := f.raw()
	r.send(reportOf(usageOf(tenant, 1, 0, 0)))
	f.settle()
	r.actions()
	paid := f.srv.Stats().TokensPaid
	var dup []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage
	for range 100 {
		dup = append(dup, usageOf(tenant, 1, 0, 0))
	}
	for range 50 {
		f.clk.Advance(20 * time.Millisecond)
		r.send(reportOf(dup...))
		f.settle()
	}
	acts := r.actions()
	s := f.srv.Stats()
	if len(acts) > 1 || s.TokensPaid-paid > 100 {
		t.Fatalf("50 reports naming the bucket 100 times each as new, within a second: %d assignments sent, %d more tokens paid; want at most one, and at most one burst",
			len(acts), s.TokensPaid-paid)
	}
}
