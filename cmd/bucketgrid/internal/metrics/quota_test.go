package metrics

import (
	"fmt"
	"testing"

	"github.com/bucketgrid/bucketgrid/cmd/bucketgrid/internal/quota"
)

// TestQuota: every RLQS series is exported with its fixed label values and
// the value of its Stats field, whatever clients sent.
func TestQuota(t *testing.T) {
	m := New(0)
	m.Quota(func() quota.Stats {
		return quota.Stats{StreamsOpened: 1, Streams: 2, StreamErrors: 3, Reports: 4, Usages: 5, Buckets: 6,
			GridBuckets: 7, Ghosts: 8, Refused: quota.Refusals{StreamLimit: 9, ServerLimit: 22, TooLarge: 23}, TrackedBytes: 24, Dropped: 10,
			Evicted:       quota.Evictions{Ghost: 25, Largest: 26, Idle: 27},
			Actions:       quota.Actions{TokenBucket: 11, AllowAll: 12, DenyAll: 13, Abandon: 14},
			AbandonedIdle: 15, AbandonedUnreported: 16, Expired: 17, TokensPaid: 18, TokensReturned: 19, Debt: 20, GridErrors: 21,
			Closed: quota.Closes{Silent: 28, Idle: 29}}
	})
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range fams {
		for _, mt := range f.GetMetric() {
			name := f.GetName()
			for _, l := range mt.GetLabel() {
				name += fmt.Sprintf("{%s=%s}", l.GetName(), l.GetValue())
			}
			got[name] = mt.GetCounter().GetValue() + mt.GetGauge().GetValue()
		}
	}
	want := map[string]float64{
		"bucketgrid_rlqs_streams_opened_total": 1, "bucketgrid_rlqs_streams_open": 2,
		"bucketgrid_rlqs_errors_total{kind=stream}": 3, "bucketgrid_rlqs_reports_total": 4,
		"bucketgrid_rlqs_report_buckets_total": 5, "bucketgrid_rlqs_buckets": 6, "bucketgrid_rlqs_grid_buckets": 7,
		"bucketgrid_rlqs_ghosts": 8, "bucketgrid_rlqs_refused_buckets_total{reason=stream_limit}": 9,
		"bucketgrid_rlqs_errors_total{kind=dropped}":             10,
		"bucketgrid_rlqs_assignments_total{action=token_bucket}": 11, "bucketgrid_rlqs_assignments_total{action=allow_all}": 12,
		"bucketgrid_rlqs_assignments_total{action=deny_all}": 13, "bucketgrid_rlqs_assignments_total{action=abandon}": 14,
		"bucketgrid_rlqs_abandons_total{reason=idle}": 15, "bucketgrid_rlqs_abandons_total{reason=unreported}": 16,
		"bucketgrid_rlqs_expired_total": 17, "bucketgrid_rlqs_tokens_paid_total": 18, "bucketgrid_rlqs_tokens_returned_total": 19,
		"bucketgrid_rlqs_debt_tokens": 20, "bucketgrid_rlqs_errors_total{kind=grid}": 21,
		"bucketgrid_rlqs_refused_buckets_total{reason=server_limit}": 22, "bucketgrid_rlqs_refused_buckets_total{reason=too_large}": 23,
		"bucketgrid_rlqs_tracked_bytes": 24, "bucketgrid_rlqs_evicted_buckets_total{rule=ghost}": 25,
		"bucketgrid_rlqs_evicted_buckets_total{rule=largest_stream}": 26, "bucketgrid_rlqs_evicted_buckets_total{rule=idle}": 27,
		"bucketgrid_rlqs_streams_closed_total{reason=silent}": 28, "bucketgrid_rlqs_streams_closed_total{reason=idle}": 29,
	}
	for name, v := range want {
		if g, ok := got[name]; !ok || g != v {
			t.Errorf("%s = %v (exported %v), want %v", name, g, ok, v)
		}
	}
	n := 0
	for name := range got {
		if len(name) > len("bucketgrid_rlqs_") && name[:len("bucketgrid_rlqs_")] == "bucketgrid_rlqs_" {
			n++
		}
	}
	if n != len(want) {
		t.Errorf("%d RLQS series exported, want %d: a series without a test", n, len(want))
	}
	var none *Metrics
	none.Quota(func() quota.Stats { return quota.Stats{} })
}
