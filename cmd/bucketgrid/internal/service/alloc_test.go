package service

import (
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/policy"
)

// TestResponseAllocations: Envoy's answer for one descriptor is the
// response, its statuses slice and one allocation for the descriptor's
// messages (status, limit, reset), whose fields are as before.
func TestResponseAllocations(t *testing.T) {
	s := New(Options{})
	rule := &policy.Rule{Limit: policy.Limit{Name: "r", RequestsPerUnit: 10, Unit: policy.Unit(2)}} // a minute
	d := policy.Decision{Code: policy.OverLimit, Statuses: []policy.Status{
		{Code: policy.OverLimit, Remaining: 0, Over: true, ResetAfter: 1500 * time.Millisecond, Rule: rule}}}
	if n := testing.AllocsPerRun(100, func() { s.response(&d) }); n > 3 {
		t.Errorf("%v allocations for one descriptor, want at most 3", n)
	}
	st := s.response(&d).GetStatuses()[0]
	if st.GetCode() != 2 || st.GetCurrentLimit().GetName() != "r" || st.GetCurrentLimit().GetRequestsPerUnit() != 10 ||
		st.GetCurrentLimit().GetUnit().String() != "MINUTE" ||
		st.GetDurationUntilReset().GetSeconds() != 1 || st.GetDurationUntilReset().GetNanos() != 500_000_000 {
		t.Fatalf("status %v", st)
	}
}
