// Package metrics is the Prometheus instrumentation of the rate-limit
// service: per rule, the counters envoyproxy/ratelimit keeps (total hits,
// within, near and over the limit, shadow-mode overrides), named by its
// stats keys; per domain, requests, errors and latency.
//
// Every label value comes from the configuration, never from a client,
// except where the configuration asks for client values
// (detailed_metric, value_to_metric, Envoy's limit overrides): a fixed
// number of those keys have series of their own, the most recently used
// ones, so clients can never grow the number of series without bound and
// a key that was busy once does not keep its series forever. When a new
// key needs room, the least recently used key's series are deleted and
// their counts added to the rule's configuration path with the suffix
// ".__other", so the sum of a rule's series never falls.
package metrics

import (
	"container/list"
	"github.com/bucketgrid/bucketgrid"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/bucketgrid/bucketgrid/policy"
)

// UnknownDomain is the domain label of requests whose domain is not
// configured (or not readable): clients choose domains too.
const UnknownDomain = "_unknown"

// maxLabelBytes bounds a rule label; longer ones are cut.
const maxLabelBytes = 256

// Metrics holds the service's collectors in a registry of its own. A nil
// *Metrics records nothing, so every method may be called on nil.
type Metrics struct {
	reg *prometheus.Registry

	hits, within, near, over, shadow *prometheus.CounterVec
	globalShadow                     prometheus.Counter
	requests, errors                 *prometheus.CounterVec
	latency                          *prometheus.HistogramVec
	configLoads                      *prometheus.CounterVec

	maxValued int
	mu        sync.Mutex               // guards valued, lru and every valued series' counts
	valued    map[string]*list.Element // value-bearing rule label → its *valuedKey in lru
	lru       list.List                // of *valuedKey, most recently used first

	rules     sync.Map // rule label → *ruleCounters
	endpoints sync.Map // endpoint → prometheus.Observer
}

// endpoint is a latency series: a domain label and an API.
type endpoint struct{ domain, api string }

// ruleCounters are one rule's counters, looked up once.
type ruleCounters struct {
	hits, within, near, over, shadow prometheus.Counter
}

// valuedKey is a rule label holding client values, with its counters.
type valuedKey struct {
	label, path string
	c           *ruleCounters
}

// New returns the collectors, registered with the Go and process
// collectors in a new registry. maxValued bounds the rule labels that
// carry client values (detailed_metric and the like); 0 admits none.
func New(maxValued int) *Metrics {
	rule := []string{"rule"}
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "bucketgrid_rls", Name: name, Help: help}, rule)
	}
	m := &Metrics{
		reg:    prometheus.NewRegistry(),
		hits:   counter("total_hits_total", "Hits counted against a rule (envoyproxy/ratelimit's total_hits)."),
		within: counter("within_limit_total", "Hits a rule admitted."),
		near:   counter("near_limit_total", "Hits above the near-limit ratio of a rule's limit."),
		over:   counter("over_limit_total", "Hits over a rule's limit."),
		shadow: counter("shadow_mode_total", "Hits over a rule's limit that shadow mode let through."),
		globalShadow: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "bucketgrid_rls", Name: "global_shadow_mode_total",
			Help: "Requests over the limit that the service-wide shadow mode answered OK."}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "bucketgrid_rls", Name: "requests_total",
			Help: "Requests answered, by domain, API (grpc, json) and overall code."}, []string{"domain", "api", "code"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "bucketgrid_rls", Name: "errors_total",
			Help: "Requests not answered, by domain, API and kind (invalid_request, no_config, backend, timeout, canceled, internal)."},
			[]string{"domain", "api", "kind"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "bucketgrid_rls", Name: "request_duration_seconds",
			Help:    "Time to answer a request, by domain and API.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}}, []string{"domain", "api"}),
		configLoads: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "bucketgrid_rls", Name: "config_loads_total",
			Help: "Configuration loads, by result (success, error)."}, []string{"result"}),
		maxValued: maxValued,
		valued:    map[string]*list.Element{},
	}
	m.reg.MustRegister(m.hits, m.within, m.near, m.over, m.shadow, m.globalShadow, m.requests, m.errors,
		m.latency, m.configLoads, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry returns the registry, to register more collectors or gather.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus exposition formats.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Rule names the series of a counted descriptor's rule.
type Rule struct {
	// Key is the rule's stats key, and Valued whether it holds values taken
	// from the request (policy.Rules.StatsKey).
	Key    string
	Valued bool
	// Path is the rule's configuration path (policy.Rule.Path).
	Path string
}

// RuleLabel returns the rule label of r: its stats key (cut to
// maxLabelBytes, invalid UTF-8 replaced), or for a key that carries client
// values when none of the bound's series is to spare, its configuration path
// + ".__other". It does not admit a key: Descriptor does.
func (m *Metrics) RuleLabel(r *Rule) string {
	key := label(r.Key)
	if !r.Valued {
		return key
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.valued[key] != nil || m.maxValued > 0 {
		return key
	}
	return label(r.Path) + ".__other"
}

// label makes a stats key a label value: valid UTF-8 (Prometheus refuses
// anything else, and a client's bytes reach it through detailed_metric),
// cut at a rune boundary to maxLabelBytes.
func label(key string) string {
	if !utf8.ValidString(key) {
		key = strings.ToValidUTF8(key, "\uFFFD")
	}
	if len(key) > maxLabelBytes {
		n := maxLabelBytes
		for n > 0 && !utf8.RuneStart(key[n]) {
			n--
		}
		key = key[:n]
	}
	return key
}

// Descriptor records one counted descriptor's status under its rule.
func (m *Metrics) Descriptor(r *Rule, st *policy.Status, hits uint64) {
	if m == nil {
		return
	}
	if r.Valued {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.count(m.valuedCounters(r), st, hits)
		return
	}
	m.count(m.counters(label(r.Key)), st, hits)
}

// counters returns the counters of rule label l.
func (m *Metrics) counters(l string) *ruleCounters {
	rc, ok := m.rules.Load(l)
	if !ok {
		rc, _ = m.rules.LoadOrStore(l, &ruleCounters{
			hits: m.hits.WithLabelValues(l), within: m.within.WithLabelValues(l), near: m.near.WithLabelValues(l),
			over: m.over.WithLabelValues(l), shadow: m.shadow.WithLabelValues(l)})
	}
	return rc.(*ruleCounters)
}

// valuedCounters returns the counters of r's client-valued label, making
// it the most recently used: a new label takes the place of the least
// recently used one when the bound is reached, whose counts move to its
// rule's .__other series. With a bound of 0 every such key counts under
// .__other. m.mu is held.
func (m *Metrics) valuedCounters(r *Rule) *ruleCounters {
	key := label(r.Key)
	if e := m.valued[key]; e != nil {
		m.lru.MoveToFront(e)
		return e.Value.(*valuedKey).c
	}
	if m.maxValued <= 0 {
		return m.counters(label(r.Path) + ".__other")
	}
	if m.lru.Len() >= m.maxValued {
		old := m.lru.Remove(m.lru.Back()).(*valuedKey)
		delete(m.valued, old.label)
		m.retire(old)
	}
	vk := &valuedKey{label: key, path: label(r.Path), c: &ruleCounters{
		hits: m.hits.WithLabelValues(key), within: m.within.WithLabelValues(key), near: m.near.WithLabelValues(key),
		over: m.over.WithLabelValues(key), shadow: m.shadow.WithLabelValues(key)}}
	m.valued[key] = m.lru.PushFront(vk)
	return vk.c
}

// retire deletes the series of an evicted key, adding its counts to its
// rule's .__other series. m.mu is held, so no count is added meanwhile.
func (m *Metrics) retire(vk *valuedKey) {
	other := m.counters(vk.path + ".__other")
	for _, pair := range [][2]prometheus.Counter{{vk.c.hits, other.hits}, {vk.c.within, other.within},
		{vk.c.near, other.near}, {vk.c.over, other.over}, {vk.c.shadow, other.shadow}} {
		var d dto.Metric
		if pair[0].Write(&d) == nil {
			if v := d.GetCounter().GetValue(); v > 0 {
				pair[1].Add(v)
			}
		}
	}
	for _, v := range []*prometheus.CounterVec{m.hits, m.within, m.near, m.over, m.shadow} {
		v.DeleteLabelValues(vk.label)
	}
}

// count adds a descriptor's hits and status to c.
func (m *Metrics) count(c *ruleCounters, st *policy.Status, hits uint64) {
	add := func(v prometheus.Counter, n uint64) {
		if n > 0 {
			v.Add(float64(n))
		}
	}
	_, within, near, over, shadow := st.Counts()
	add(c.hits, hits)
	add(c.within, within)
	add(c.near, near)
	add(c.over, over)
	add(c.shadow, shadow)
}

// Request records one request: its overall code, or the kind of error
// that kept it from being answered ("" when answered).
func (m *Metrics) Request(domain, api, code, errKind string, d time.Duration) {
	if m == nil {
		return
	}
	if errKind != "" {
		m.errors.WithLabelValues(domain, api, errKind).Inc()
	} else {
		m.requests.WithLabelValues(domain, api, code).Inc()
	}
	k := endpoint{domain, api}
	o, ok := m.endpoints.Load(k)
	if !ok {
		o, _ = m.endpoints.LoadOrStore(k, m.latency.WithLabelValues(domain, api))
	}
	o.(prometheus.Observer).Observe(d.Seconds())
}

// Manager exports what stats reports (a Manager's Stats): the requests
// decided from a local share while the backend was out, apart from the
// backend's decisions counted above, the breakers opened and open, and the
// tokens charged back.
func (m *Metrics) Manager(stats func() bucketgrid.Stats) {
	if m == nil {
		return
	}
	counter := func(name, help string, v func(s bucketgrid.Stats) int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "bucketgrid_rls", Name: name, Help: help},
			func() float64 { return float64(v(stats())) })
	}
	m.reg.MustRegister(
		counter("degraded_total", "Bucket operations decided from a local share of the limit while the backend was out (-degrade).",
			func(s bucketgrid.Stats) int64 { return s.Degraded }),
		counter("breaker_opens_total", "Circuit breakers opened on a backend outage (-degrade).",
			func(s bucketgrid.Stats) int64 { return s.BreakerOpens }),
		counter("degrade_charged_tokens_total", "Tokens consumed locally during an outage and charged to the real buckets after it.",
			func(s bucketgrid.Stats) int64 { return s.Charged }),
		counter("corrupt_replaced_total", "Corrupt stored buckets replaced by new ones.",
			func(s bucketgrid.Stats) int64 { return s.CorruptReplaced }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "bucketgrid_rls", Name: "breakers_open",
			Help: "Circuit breakers open now: backends (grid members, or the store) decided around (-degrade)."},
			func() float64 { return float64(stats().OpenBreakers) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "bucketgrid_rls", Name: "degrade_instances",
			Help: "Instances each limit is shared by while the backend is out (-degrade): stated, counted (-degrade-count) or the grid's members."},
			func() float64 { return float64(stats().Instances) }),
	)
}

// GlobalShadow records a request the service-wide shadow mode let through.
func (m *Metrics) GlobalShadow() {
	if m != nil {
		m.globalShadow.Inc()
	}
}

// ConfigLoad records a configuration load.
func (m *Metrics) ConfigLoad(ok bool) {
	if m == nil {
		return
	}
	r := "success"
	if !ok {
		r = "error"
	}
	m.configLoads.WithLabelValues(r).Inc()
}
