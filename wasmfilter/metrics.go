package wasmfilter

// The counters the filter keeps, named
// "<stat_prefix>.policy.rules.<event>" (rules names the slot table).
// Envoy files them under "wasmcustom.", which its admin output strips
// again. The events follow the names of Envoy's own rate-limit filters
// where one exists.
const (
	// metricOK counts requests admitted that went upstream.
	metricOK = iota
	// metricOverLimit counts requests refused over a limit (429).
	metricOverLimit
	// metricError counts shared-data failures.
	metricError
	// metricFailureModeAllowed counts failures let through by
	// failure_mode open.
	metricFailureModeAllowed
	// metricTableFull counts new clients that found no slot (table_full
	// reject or allow).
	metricTableFull
	// metricTableFullAllowed counts those let through by table_full allow.
	metricTableFullAllowed
	// metricEvicted counts buckets evicted for a new client (table_full
	// evict_oldest).
	metricEvicted
	// metricCASConflict counts compare-and-swap races lost and retried.
	metricCASConflict
	// metricCASGaveUp counts requests rejected after max_attempts lost
	// races.
	metricCASGaveUp
	// metricInvalidKey counts requests answered 400 for a key the store
	// cannot hold.
	metricInvalidKey
	// metricInvalidPath counts requests answered 400 for a :path whose
	// spelling upstreams read differently (see normalizePath).
	metricInvalidPath
	numMetrics
)

var metricEvents = [numMetrics]string{"ok", "over_limit", "error", "failure_mode_allowed", "table_full",
	"table_full_allowed", "evicted", "cas_conflict", "cas_gave_up", "invalid_key", "invalid_path"}

// metrics are the filter's counters: names, and ids once defined.
type metrics struct {
	names   [numMetrics]string
	ids     [numMetrics]uint32
	defined [numMetrics]bool
}

// newMetrics names the counters of the slot table called table.
func newMetrics(statPrefix, table string) metrics {
	var m metrics
	base := statPrefix + ".policy." + table + "."
	for i, e := range metricEvents {
		m.names[i] = base + e
	}
	return m
}

// define defines every counter on host; it returns the first error, and
// counters that could not be defined are skipped by add.
func (m *metrics) define(host Host) error {
	var first error
	for i, name := range m.names {
		id, err := host.DefineMetric(MetricCounter, name)
		if err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		m.ids[i], m.defined[i] = id, true
	}
	return first
}

// add adds n to counter i; n ≤ 0 is skipped (Envoy refuses it on a counter).
func (m *metrics) add(host Host, i int, n int64) {
	if n > 0 && m.defined[i] {
		_ = host.IncrementMetric(m.ids[i], n)
	}
}
