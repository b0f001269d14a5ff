package service

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/bucketgrid/bucketgrid/cmd/bucketgrid/internal/metrics"
)

func newLogger(w io.Writer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }

// counter returns the value of the metric name with the labels, 0 when
// absent.
func counter(t *testing.T, m *metrics.Metrics, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, mt := range mf.Metric {
			if matches(mt, labels) {
				sum += mt.GetCounter().GetValue()
			}
		}
	}
	return sum
}

func matches(mt *dto.Metric, labels map[string]string) bool {
	n := 0
	for _, l := range mt.Label {
		if v, ok := labels[l.GetName()]; ok {
			if v != l.GetValue() {
				return false
			}
			n++
		}
	}
	return n == len(labels)
}

func series(t *testing.T, m *metrics.Metrics, name string) int {
	t.Helper()
	mfs, _ := m.Registry().Gather()
	for _, mf := range mfs {
		if mf.GetName() == name {
			return len(mf.Metric)
		}
	}
	return 0
}

func TestMetrics(t *testing.T) {
	m := metrics.New(3)
	s := newService(t, Options{Metrics: m})
	ctx := context.Background()
	for range 3 {
		s.ShouldRateLimit(ctx, req("shop", "client", "m"))
	}
	s.ShouldRateLimit(ctx, req("nowhere", "client", "m"))
	s.ShouldRateLimit(ctx, req("", "client", "m"))
	rule := map[string]string{"rule": "shop.client"}
	for name, want := range map[string]float64{
		"bucketgrid_rls_total_hits_total":   3,
		"bucketgrid_rls_within_limit_total": 2,
		"bucketgrid_rls_near_limit_total":   1,
		"bucketgrid_rls_over_limit_total":   1,
	} {
		if got := counter(t, m, name, rule); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if got := counter(t, m, "bucketgrid_rls_requests_total", map[string]string{"domain": "shop", "code": "OVER_LIMIT"}); got != 1 {
		t.Errorf("over-limit requests %v", got)
	}
	if got := counter(t, m, "bucketgrid_rls_requests_total", map[string]string{"domain": metrics.UnknownDomain}); got != 1 {
		t.Errorf("an unknown domain is not labelled %s: %v", metrics.UnknownDomain, got)
	}
	if got := counter(t, m, "bucketgrid_rls_errors_total", map[string]string{"kind": "invalid_request"}); got != 1 {
		t.Errorf("invalid requests %v", got)
	}
}

// TestMetricsCardinality: detailed_metric puts client values in the rule
// label, at most the bound's number of series at once; the most recently
// used values keep theirs, so a value that was busy first cannot hold its
// series forever while new ones share one. An evicted value's counts move
// to the rule's .__other series: the rule's total never falls.
func TestMetricsCardinality(t *testing.T) {
	m := metrics.New(3)
	s := newService(t, Options{Metrics: m})
	ctx := context.Background()
	hits := func(v string) float64 {
		return counter(t, m, "bucketgrid_rls_total_hits_total", map[string]string{"rule": "shop.detail_" + v})
	}
	for i := range 50 {
		s.ShouldRateLimit(ctx, req("shop", "detail", fmt.Sprint("v", i)))
		if i%10 == 0 { // v0 stays busy: it is always recent
			s.ShouldRateLimit(ctx, req("shop", "detail", "v0"))
		}
	}
	if n := series(t, m, "bucketgrid_rls_total_hits_total"); n != 4 {
		t.Fatalf("%d series, want 3 detailed and 1 overflow", n)
	}
	for _, v := range []string{"v48", "v49"} {
		if got := hits(v); got != 1 {
			t.Errorf("recent value %s: %v hits in its series, want 1", v, got)
		}
	}
	if got := hits("v40"); got != 0 {
		t.Errorf("v40 kept its series: %v", got)
	}
	if got := counter(t, m, "bucketgrid_rls_total_hits_total", map[string]string{}); got != 55 {
		t.Fatalf("the rule's series sum to %v hits, want all 55", got)
	}
	// A value evicted long ago comes back with a series of its own.
	s.ShouldRateLimit(ctx, req("shop", "detail", "v1"))
	if got := hits("v1"); got != 1 {
		t.Fatalf("v1 back: %v hits in its series, want 1", got)
	}
	if n := series(t, m, "bucketgrid_rls_total_hits_total"); n != 4 {
		t.Fatalf("%d series after v1 came back, want 4", n)
	}
}
