package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bucketgrid/bucketgrid/cmd/bucketgrid/internal/budget"
)

// Budget exports a memory budget of requests in flight under the label
// budget=name (checks: -max-inflight-bytes; quota: -rlqs-max-inflight-bytes):
// the bytes held now, the limit, and the requests refused for want of
// room, by the answer they got (over_limit: a check answered OVER_LIMIT
// unread; resource_exhausted: another gRPC call; unavailable: an HTTP
// request answered 503), and of those the refusals by a peer address's or
// a connection's share.
func (m *Metrics) Budget(name string, b *budget.Budget) {
	if m == nil {
		return
	}
	refused := func(answer string, v func(budget.Refusals) int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "bucketgrid_rls", Name: "budget_refusals_total",
			Help:        "Requests that found a memory budget for requests in flight full (-max-inflight-bytes, -rlqs-max-inflight-bytes), or their share of it, by the answer they got.",
			ConstLabels: prometheus.Labels{"budget": name, "answer": answer}},
			func() float64 { return float64(v(b.Refusals())) })
	}
	m.reg.MustRegister(
		refused("over_limit", func(r budget.Refusals) int64 { return r.Answered }),
		refused("resource_exhausted", func(r budget.Refusals) int64 { return r.Exhausted }),
		refused("unavailable", func(r budget.Refusals) int64 { return r.HTTP }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "bucketgrid_rls", Name: "budget_share_refusals_total",
			Help:        "Of the refusals of budget_refusals_total, those that found room in the budget but not in their peer address's or connection's share.",
			ConstLabels: prometheus.Labels{"budget": name}},
			func() float64 { return float64(b.Refusals().Shared) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "bucketgrid_rls", Name: "budget_inflight_bytes",
			Help: "Bytes that requests in flight hold of the memory budget now.", ConstLabels: prometheus.Labels{"budget": name}},
			func() float64 { return float64(b.Used()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "bucketgrid_rls", Name: "budget_limit_bytes",
			Help: "The memory budget for requests in flight (-max-inflight-bytes, -rlqs-max-inflight-bytes).", ConstLabels: prometheus.Labels{"budget": name}},
			func() float64 { return float64(b.Limit()) }),
	)
}
