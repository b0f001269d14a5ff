//go:build wasip1

package proxywasm

import (
	"strings"
	"time"
	"unsafe"

	"github.com/bucketgrid/bucketgrid/wasmfilter"
)

// pinned holds the buffers handed to the host by proxy_on_memory_allocate
// until the guest has taken them.
var pinned [][]byte

//go:wasmexport proxy_on_memory_allocate
func proxyOnMemoryAllocate(size uint32) uint32 {
	b := make([]byte, max(size, 1))
	pinned = append(pinned, b)
	return uint32(uintptr(unsafe.Pointer(&b[0])))
}

// take returns a copy of the size bytes the host wrote at ptr, a buffer from
// proxyOnMemoryAllocate, and releases every pinned buffer.
func take(ptr, size uint32) []byte {
	var out []byte
	for _, b := range pinned {
		if uint32(uintptr(unsafe.Pointer(&b[0]))) == ptr && int(size) <= len(b) {
			out = append([]byte(nil), b[:size]...)
			break
		}
	}
	clear(pinned)
	pinned = pinned[:0]
	return out
}

func strPtr(s string) unsafe.Pointer { return unsafe.Pointer(unsafe.StringData(s)) }

func bytesPtr(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(&b[0])
}

// host implements wasmfilter.Host on the imports.
type host struct{}

// configSize is the plugin configuration size passed to proxy_on_configure.
var configSize uint32

// Log calls proxy_log.
func (host) Log(level wasmfilter.LogLevel, msg string) {
	proxyLog(uint32(level), strPtr(msg), uint32(len(msg)))
}

// PluginConfiguration reads PLUGIN_CONFIGURATION with proxy_get_buffer_bytes.
func (host) PluginConfiguration() ([]byte, error) {
	if configSize == 0 {
		return nil, nil
	}
	var ptr, size uint32
	st := proxyGetBufferBytes(7, 0, configSize, unsafe.Pointer(&ptr), unsafe.Pointer(&size))
	if err := wasmfilter.StatusError(st); err != nil {
		take(0, 0)
		return nil, err
	}
	return take(ptr, size), nil
}

// Header calls proxy_get_header_map_value.
func (host) Header(m wasmfilter.MapType, name string) (string, bool, error) {
	var ptr, size uint32
	st := proxyGetHeaderMapValue(uint32(m), strPtr(name), uint32(len(name)), unsafe.Pointer(&ptr), unsafe.Pointer(&size))
	if err := wasmfilter.StatusError(st); err != nil {
		take(0, 0)
		return "", false, err
	}
	return string(take(ptr, size)), true, nil
}

// AddHeader calls proxy_add_header_map_value.
func (host) AddHeader(m wasmfilter.MapType, name, value string) error {
	return wasmfilter.StatusError(proxyAddHeaderMapValue(uint32(m), strPtr(name), uint32(len(name)),
		strPtr(value), uint32(len(value))))
}

// SendLocalResponse calls proxy_send_local_response, with no gRPC status.
func (host) SendLocalResponse(status int, details string, body []byte, headers [][2]string) error {
	h := serializePairs(headers)
	return wasmfilter.StatusError(proxySendLocalResponse(uint32(status), strPtr(details), uint32(len(details)),
		bytesPtr(body), uint32(len(body)), bytesPtr(h), uint32(len(h)), -1))
}

// Property calls proxy_get_property with the path segments NUL-separated.
func (host) Property(path ...string) ([]byte, bool, error) {
	p := strings.Join(path, "\x00")
	var ptr, size uint32
	st := proxyGetProperty(strPtr(p), uint32(len(p)), unsafe.Pointer(&ptr), unsafe.Pointer(&size))
	if err := wasmfilter.StatusError(st); err != nil {
		take(0, 0)
		return nil, false, err
	}
	return take(ptr, size), true, nil
}

// SharedData calls proxy_get_shared_data.
func (host) SharedData(key string) ([]byte, uint32, error) {
	var ptr, size, cas uint32
	st := proxyGetSharedData(strPtr(key), uint32(len(key)), unsafe.Pointer(&ptr), unsafe.Pointer(&size), unsafe.Pointer(&cas))
	if err := wasmfilter.StatusError(st); err != nil {
		take(0, 0)
		return nil, 0, err
	}
	return take(ptr, size), cas, nil
}

// SetSharedData calls proxy_set_shared_data.
func (host) SetSharedData(key string, value []byte, cas uint32) error {
	return wasmfilter.StatusError(proxySetSharedData(strPtr(key), uint32(len(key)), bytesPtr(value), uint32(len(value)), cas))
}

// DefineMetric calls proxy_define_metric.
func (host) DefineMetric(kind wasmfilter.MetricKind, name string) (uint32, error) {
	var id uint32
	err := wasmfilter.StatusError(proxyDefineMetric(uint32(kind), strPtr(name), uint32(len(name)), unsafe.Pointer(&id)))
	return id, err
}

// IncrementMetric calls proxy_increment_metric.
func (host) IncrementMetric(id uint32, delta int64) error {
	return wasmfilter.StatusError(proxyIncrementMetric(id, delta))
}

// RecordMetric calls proxy_record_metric.
func (host) RecordMetric(id uint32, value uint64) error {
	return wasmfilter.StatusError(proxyRecordMetric(id, value))
}

// GetMetric calls proxy_get_metric.
func (host) GetMetric(id uint32) (uint64, error) {
	var v uint64
	err := wasmfilter.StatusError(proxyGetMetric(id, unsafe.Pointer(&v)))
	return v, err
}

//go:wasmimport wasi_snapshot_preview1 clock_time_get
func clockTimeGet(clockID uint32, precision uint64, ret unsafe.Pointer) uint32

// now caches the time for the duration of one callback; 0 means unread.
var now int64

// Now reads WASI realtime, the clock every worker VM of one Envoy shares,
// once per callback: the ABI allows hosts to freeze time within a callback
// anyway, one check is one instant, and each host call costs (time.Now
// would make two: wall and monotonic).
func (host) Now() int64 {
	if now == 0 {
		var t uint64
		if clockTimeGet(0, 1, unsafe.Pointer(&t)) != 0 {
			return time.Now().UnixNano()
		}
		now = int64(t)
	}
	return now
}
