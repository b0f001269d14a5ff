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
// label, up to the bound; after it they share the rule's .__other series.
func TestMetricsCardinality(t *testing.T) {
	m := metrics.New(3)
	s := newService(t, Options{Metrics: m})
	for i := range 50 {
		s.ShouldRateLimit(context.Background(), req("shop", "detail", fmt.Sprint("v", i)))
	}
	if n := series(t, m, "bucketgrid_rls_total_hits_total"); n != 4 {
		t.Fatalf("%d series, want 3 detailed and 1 overflow", n)
	}
	if got := counter(t, m, "bucketgrid_rls_total_hits_total", map[string]string{"rule": "shop.detail.__other"}); got != 47 {
		t.Fatalf("overflow series %v, want 47", got)
	}
	if got := counter(t, m, "bucketgrid_rls_total_hits_total", map[string]string{"rule": "shop.detail_v0"}); got != 1 {
		t.Fatalf("detailed series %v, want 1", got)
	}
}
