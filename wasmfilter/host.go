package wasmfilter

import "strconv"

// Host is what the filter needs from a proxy-wasm host, one method per ABI
// 0.2.1 host call it uses. The wasip1 binding (package
// github.com/bucketgrid/bucketgrid/wasmfilter/proxywasm) implements it on the
// real imports; tests implement it in Go. A Host is used by one VM, from one
// thread at a time, as proxy-wasm hosts call a VM.
type Host interface {
	// Log writes msg at level (proxy_log).
	Log(level LogLevel, msg string)
	// PluginConfiguration returns the plugin configuration buffer
	// (proxy_get_buffer_bytes of PLUGIN_CONFIGURATION); only valid during
	// proxy_on_configure.
	PluginConfiguration() ([]byte, error)
	// Header returns the value of name in map m (proxy_get_header_map_value);
	// found is false when the header is absent.
	Header(m MapType, name string) (value string, found bool, err error)
	// AddHeader appends a header to map m (proxy_add_header_map_value).
	AddHeader(m MapType, name, value string) error
	// SendLocalResponse answers the current stream without going upstream
	// (proxy_send_local_response).
	SendLocalResponse(status int, details string, body []byte, headers [][2]string) error
	// Property returns the property at path (proxy_get_property), for
	// instance []string{"source", "address"}.
	Property(path ...string) (value []byte, found bool, err error)
	// SharedData returns the value of key with its compare-and-swap token
	// (proxy_get_shared_data); an absent key yields StatusNotFound.
	SharedData(key string) (value []byte, cas uint32, err error)
	// SetSharedData writes key (proxy_set_shared_data). A cas of 0 writes
	// unconditionally; any other cas writes only when it equals the stored
	// token, and otherwise fails with StatusCASMismatch.
	SetSharedData(key string, value []byte, cas uint32) error
	// DefineMetric defines a metric of kind named name and returns its id
	// (proxy_define_metric). Envoy prefixes the name with "wasmcustom."
	// internally and strips that prefix again in its admin output; every VM
	// defining the same name shares one metric.
	DefineMetric(kind MetricKind, name string) (id uint32, err error)
	// IncrementMetric adds delta to a metric (proxy_increment_metric). Envoy
	// refuses a delta of 0 or less on a counter with StatusBadArgument.
	IncrementMetric(id uint32, delta int64) error
	// RecordMetric sets a gauge, records a histogram value, or adds to a
	// counter (proxy_record_metric).
	RecordMetric(id uint32, value uint64) error
	// GetMetric returns a counter's or gauge's value (proxy_get_metric).
	GetMetric(id uint32) (uint64, error)
	// Now returns the wall-clock time in Unix nanoseconds. Every VM of one
	// Envoy reads the same clock (WASI realtime), which makes the stored
	// refill times comparable across workers.
	Now() int64
}

// LogLevel is a proxy_log_level_t.
type LogLevel uint32

// The log levels of ABI 0.2.1.
const (
	LogTrace LogLevel = iota
	LogDebug
	LogInfo
	LogWarn
	LogError
	LogCritical
)

// MetricKind is a proxy_metric_type_t.
type MetricKind uint32

// The metric kinds of ABI 0.2.1.
const (
	MetricCounter   MetricKind = 0
	MetricGauge     MetricKind = 1
	MetricHistogram MetricKind = 2
)

// MapType is a proxy_map_type_t: which header map a call addresses.
type MapType uint32

// The header maps the filter uses.
const (
	RequestHeaders  MapType = 0
	ResponseHeaders MapType = 2
)

// Action is a proxy_action_t returned by the stream callbacks.
type Action uint32

// The actions.
const (
	// ActionContinue lets the stream proceed.
	ActionContinue Action = 0
	// ActionPause stops the stream; the filter pauses after sending a local
	// response, as the host then finishes the stream itself.
	ActionPause Action = 1
)

// Status is a proxy_status_t. Host methods return it as their error; OK is
// reported as a nil error.
type Status uint32

// The statuses of ABI 0.2.1.
const (
	StatusOK                  Status = 0
	StatusNotFound            Status = 1
	StatusBadArgument         Status = 2
	StatusSerializationFailed Status = 3
	StatusParseFailure        Status = 4
	StatusInvalidMemoryAccess Status = 6
	StatusEmpty               Status = 7
	StatusCASMismatch         Status = 8
	StatusInternalFailure     Status = 10
	StatusUnimplemented       Status = 12
)

// Error returns the ABI name of s.
func (s Status) Error() string {
	switch s {
	case StatusOK:
		return "proxy-wasm: OK"
	case StatusNotFound:
		return "proxy-wasm: NOT_FOUND"
	case StatusBadArgument:
		return "proxy-wasm: BAD_ARGUMENT"
	case StatusSerializationFailed:
		return "proxy-wasm: SERIALIZATION_FAILURE"
	case StatusParseFailure:
		return "proxy-wasm: PARSE_FAILURE"
	case StatusInvalidMemoryAccess:
		return "proxy-wasm: INVALID_MEMORY_ACCESS"
	case StatusEmpty:
		return "proxy-wasm: EMPTY"
	case StatusCASMismatch:
		return "proxy-wasm: CAS_MISMATCH"
	case StatusInternalFailure:
		return "proxy-wasm: INTERNAL_FAILURE"
	case StatusUnimplemented:
		return "proxy-wasm: UNIMPLEMENTED"
	}
	return "proxy-wasm: status " + strconv.FormatUint(uint64(s), 10)
}

// StatusError converts a raw status returned by a host call to an error: nil
// for OK, the Status otherwise.
func StatusError(raw uint32) error {
	if raw == uint32(StatusOK) {
		return nil
	}
	return Status(raw)
}
