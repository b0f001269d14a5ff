package service

import (
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/bucketgrid/bucketgrid/policy"
)

// TestResponseAllocations: Envoy's answer for one descriptor (the
// response, its statuses, the descriptor's status, limit and reset) is one
// allocation, with the fields as before; for more descriptors, three.
func TestResponseAllocations(t *testing.T) {
	s := New(Options{})
	rule := &policy.Rule{Limit: policy.Limit{Name: "r", RequestsPerUnit: 10, Unit: policy.Unit(2)}} // a minute
	d := policy.Decision{Code: policy.OverLimit, Statuses: []policy.Status{
		{Code: policy.OverLimit, Remaining: 0, Over: true, ResetAfter: 1500 * time.Millisecond, Rule: rule}}}
	if n := testing.AllocsPerRun(100, func() { s.response(&d) }); n > 1 {
		t.Errorf("%v allocations for one descriptor, want 1", n)
	}
	two := policy.Decision{Code: policy.OverLimit, Statuses: []policy.Status{d.Statuses[0], d.Statuses[0]}}
	if n := testing.AllocsPerRun(100, func() { s.response(&two) }); n > 3 {
		t.Errorf("%v allocations for two descriptors, want at most 3", n)
	}
	for _, st := range s.response(&two).GetStatuses() {
		if st.GetCurrentLimit().GetName() != "r" || st.GetDurationUntilReset().GetNanos() != 500_000_000 {
			t.Fatalf("status of two %v", st)
		}
	}
	st := s.response(&d).GetStatuses()[0]
	if st.GetCode() != 2 || st.GetCurrentLimit().GetName() != "r" || st.GetCurrentLimit().GetRequestsPerUnit() != 10 ||
		st.GetCurrentLimit().GetUnit().String() != "MINUTE" ||
		st.GetDurationUntilReset().GetSeconds() != 1 || st.GetDurationUntilReset().GetNanos() != 500_000_000 {
		t.Fatalf("status %v", st)
	}
}

// TestToRequestAllocations: Envoy's request of one descriptor of a few
// entries is converted in one allocation, entries as sent.
func TestToRequestAllocations(t *testing.T) {
	in := &rlspb.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{{
		Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "user", Value: "alice"}, {Key: "path", Value: "/a"}}}}}
	var got policy.Request
	if n := testing.AllocsPerRun(100, func() { got = toRequest(in) }); n > 1 {
		t.Errorf("%v allocations, want 1", n)
	}
	if got.Domain != "d" || len(got.Descriptors) != 1 || len(got.Descriptors[0].Entries) != 2 ||
		got.Descriptors[0].Entries[0] != (policy.Entry{Key: "user", Value: "alice"}) ||
		got.Descriptors[0].Entries[1] != (policy.Entry{Key: "path", Value: "/a"}) {
		t.Fatalf("converted %+v", got)
	}
}
