package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bucketgrid/bucketgrid/cmd/bucketgrid/internal/quota"
)

// quotaCollector exports a quota server's Stats at each scrape. Its
// labels take fixed values only (action kinds, reasons, error kinds):
// bucket ids and domains come from clients and never become labels.
type quotaCollector struct {
	stats func() quota.Stats
	descs map[string]*prometheus.Desc
}

// quotaSeries are the RLQS series: name, help, label (if any).
var quotaSeries = []struct{ name, help, label string }{
	{"streams_opened_total", "Quota streams accepted.", ""},
	{"streams_open", "Quota streams open now.", ""},
	{"reports_total", "Usage reports received.", ""},
	{"streams_closed_total", "Quota streams the server closed for want of reports, by reason (silent: no whole report within 3 s of its start; idle: none for 3 report periods, 15 s).", "reason"},
	{"report_buckets_total", "Bucket usages in the reports received.", ""},
	{"buckets", "Bucket ids the open streams subscribed, tracked now.", ""},
	{"grid_buckets", "Grid buckets whose Envoys share them now.", ""},
	{"ghosts", "Token buckets of closed streams still paid for until they expire on their Envoy.", ""},
	{"assignments_total", "Bucket actions sent, by action (token_bucket, allow_all, deny_all, abandon).", "action"},
	{"abandons_total", "Abandons decided, by reason (idle: no request for a minute; unreported: the Envoy stopped reporting the bucket).", "reason"},
	{"expired_total", "Assignments of closed streams that ran to their expiry.", ""},
	{"refused_buckets_total", "New bucket ids answered DENY_ALL without being tracked, by reason (stream_limit, server_limit, too_large).", "reason"},
	{"evicted_buckets_total", "Tracked bucket ids forgotten (answered DENY_ALL) to make room for new ones, by rule (ghost: a closed stream's; largest_stream: the least recently active of the stream holding the most; idle: the new id's own stream's, unused for two periods).", "rule"},
	{"tracked_bytes", "What the tracked bucket ids cost against the server's memory budget.", ""},
	{"tokens_paid_total", "Tokens consumed from grid buckets to pay for assignments.", ""},
	{"tokens_returned_total", "Tokens given back to grid buckets.", ""},
	{"debt_tokens", "Tokens the grid buckets are owed now (closed streams' supply not yet covered).", ""},
	{"errors_total", "Failures, by kind (grid: a grid operation; dropped: a response lost to a full stream queue; stream: a stream ended on an error).", "kind"},
}

// Quota exports a quota server's counters under bucketgrid_rlqs_.
func (m *Metrics) Quota(stats func() quota.Stats) {
	if m == nil {
		return
	}
	c := &quotaCollector{stats: stats, descs: map[string]*prometheus.Desc{}}
	for _, s := range quotaSeries {
		var labels []string
		if s.label != "" {
			labels = []string{s.label}
		}
		c.descs[s.name] = prometheus.NewDesc("bucketgrid_rlqs_"+s.name, s.help, labels, nil)
	}
	m.reg.MustRegister(c)
}

// Describe implements prometheus.Collector.
func (c *quotaCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *quotaCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	emit := func(name string, t prometheus.ValueType, v int64, label ...string) {
		ch <- prometheus.MustNewConstMetric(c.descs[name], t, float64(v), label...)
	}
	counter, gauge := prometheus.CounterValue, prometheus.GaugeValue
	emit("streams_opened_total", counter, s.StreamsOpened)
	emit("streams_open", gauge, int64(s.Streams))
	emit("reports_total", counter, s.Reports)
	emit("streams_closed_total", counter, s.Closed.Silent, "silent")
	emit("streams_closed_total", counter, s.Closed.Idle, "idle")
	emit("report_buckets_total", counter, s.Usages)
	emit("buckets", gauge, int64(s.Buckets))
	emit("grid_buckets", gauge, int64(s.GridBuckets))
	emit("ghosts", gauge, int64(s.Ghosts))
	emit("assignments_total", counter, s.Actions.TokenBucket, "token_bucket")
	emit("assignments_total", counter, s.Actions.AllowAll, "allow_all")
	emit("assignments_total", counter, s.Actions.DenyAll, "deny_all")
	emit("assignments_total", counter, s.Actions.Abandon, "abandon")
	emit("abandons_total", counter, s.AbandonedIdle, "idle")
	emit("abandons_total", counter, s.AbandonedUnreported, "unreported")
	emit("expired_total", counter, s.Expired)
	emit("refused_buckets_total", counter, s.Refused.StreamLimit, "stream_limit")
	emit("refused_buckets_total", counter, s.Refused.ServerLimit, "server_limit")
	emit("refused_buckets_total", counter, s.Refused.TooLarge, "too_large")
	emit("evicted_buckets_total", counter, s.Evicted.Ghost, "ghost")
	emit("evicted_buckets_total", counter, s.Evicted.Largest, "largest_stream")
	emit("evicted_buckets_total", counter, s.Evicted.Idle, "idle")
	emit("tracked_bytes", gauge, s.TrackedBytes)
	emit("tokens_paid_total", counter, s.TokensPaid)
	emit("tokens_returned_total", counter, s.TokensReturned)
	emit("debt_tokens", gauge, s.Debt)
	emit("errors_total", counter, s.GridErrors, "grid")
	emit("errors_total", counter, s.Dropped, "dropped")
	emit("errors_total", counter, s.StreamErrors, "stream")
}
