package wasmfilter

import (
	"sync/atomic"
	"testing"

	"github.com/bucketgrid/bucketgrid/wasmfilter/internal/envoystats"
	"github.com/bucketgrid/bucketgrid/wasmfilter/internal/shareddata"
)

// fakeHost is one VM's view of a fake Envoy: the shared data and the stats
// (shared by every fakeHost of one "Envoy"), a clock, and the current
// request.
type fakeHost struct {
	shared *shareddata.Data
	clock  *atomic.Int64
	config []byte
	stats  *envoystats.VM

	reqHeaders map[string]string
	source     string // source.address; "" for none

	respHeaders [][2]string
	local       *localResponse
	logs        []string
}

type localResponse struct {
	status  int
	details string
	body    string
	headers map[string]string
}

func newFakeHost(shared *shareddata.Data, clock *atomic.Int64, config string) *fakeHost {
	return &fakeHost{shared: shared, clock: clock, config: []byte(config), stats: envoystats.New().VM()}
}

func (h *fakeHost) Log(level LogLevel, msg string) {
	h.logs = append(h.logs, msg)
}

func (h *fakeHost) PluginConfiguration() ([]byte, error) { return h.config, nil }

func (h *fakeHost) Header(m MapType, name string) (string, bool, error) {
	if m != RequestHeaders {
		return "", false, StatusBadArgument
	}
	v, ok := h.reqHeaders[name]
	if !ok {
		return "", false, StatusNotFound
	}
	return v, true, nil
}

func (h *fakeHost) AddHeader(m MapType, name, value string) error {
	if m != ResponseHeaders {
		return StatusBadArgument
	}
	h.respHeaders = append(h.respHeaders, [2]string{name, value})
	return nil
}

func (h *fakeHost) SendLocalResponse(status int, details string, body []byte, headers [][2]string) error {
	if h.local != nil {
		panic("two local responses")
	}
	l := &localResponse{status: status, details: details, body: string(body), headers: map[string]string{}}
	for _, kv := range headers {
		l.headers[kv[0]] = kv[1]
	}
	h.local = l
	return nil
}

func (h *fakeHost) Property(path ...string) ([]byte, bool, error) {
	if len(path) == 2 && path[0] == "source" && path[1] == "address" && h.source != "" {
		return []byte(h.source), true, nil
	}
	return nil, false, StatusNotFound
}

func (h *fakeHost) SharedData(key string) ([]byte, uint32, error) {
	v, c, st := h.shared.Get(key)
	return v, c, StatusError(st)
}

func (h *fakeHost) SetSharedData(key string, value []byte, cas uint32) error {
	return StatusError(h.shared.Set(key, value, cas))
}

func (h *fakeHost) DefineMetric(kind MetricKind, name string) (uint32, error) {
	id, st := h.stats.Define(uint32(kind), name)
	return id, StatusError(st)
}

func (h *fakeHost) IncrementMetric(id uint32, delta int64) error {
	return StatusError(h.stats.Increment(id, delta))
}

func (h *fakeHost) RecordMetric(id uint32, value uint64) error {
	return StatusError(h.stats.Record(id, value))
}

func (h *fakeHost) GetMetric(id uint32) (uint64, error) {
	v, st := h.stats.Get(id)
	return v, StatusError(st)
}

func (h *fakeHost) Now() int64 { return h.clock.Load() }

// fakeVM is a VM with its host, configured as plugin context 1.
type fakeVM struct {
	vm   *VM
	host *fakeHost
	next uint32
}

// fakeEnvoy is what every VM of one fake Envoy shares.
type fakeEnvoy struct {
	shared *shareddata.Data
	stats  *envoystats.Stats
	clock  *atomic.Int64
}

func newFakeEnvoy() *fakeEnvoy {
	return &fakeEnvoy{shared: shareddata.New(), stats: envoystats.New(), clock: newClock()}
}

// vm starts a VM (a worker) configured with config.
func (e *fakeEnvoy) vm(t testing.TB, config string) *fakeVM {
	t.Helper()
	h := newFakeHost(e.shared, e.clock, config)
	h.stats = e.stats.VM()
	return startFakeVM(t, h, config)
}

// metric returns the counter of policy and event under the default stat
// prefix, as Envoy's /stats shows it; a counter never defined fails t.
func (e *fakeEnvoy) metric(t testing.TB, policy, event string) uint64 {
	t.Helper()
	v, ok := e.stats.Value("bucketgrid.policy." + policy + "." + event)
	if !ok {
		t.Fatalf("no metric %s.%s; have %v", policy, event, e.stats.Names())
	}
	return v
}

func newFakeVM(t testing.TB, shared *shareddata.Data, clock *atomic.Int64, config string) *fakeVM {
	t.Helper()
	return startFakeVM(t, newFakeHost(shared, clock, config), config)
}

func startFakeVM(t testing.TB, h *fakeHost, config string) *fakeVM {
	t.Helper()
	vm := NewVM(h)
	vm.OnContextCreate(1, 0)
	if !vm.OnVMStart(1, 0) {
		t.Fatal("vm start refused")
	}
	if !vm.OnConfigure(1, len(config)) {
		t.Fatalf("configuration refused: %v", h.logs)
	}
	return &fakeVM{vm: vm, host: h, next: 2}
}

// result is what one request saw.
type result struct {
	status  int    // 200 when admitted
	details string // of a local response
	headers map[string]string
	body    string
}

// do runs one request through the whole stream lifecycle.
func (f *fakeVM) do(source string, headers map[string]string) result {
	h := f.host
	h.reqHeaders, h.source, h.respHeaders, h.local = headers, source, nil, nil
	id := f.next
	f.next++
	f.vm.OnContextCreate(id, 1)
	res := result{status: 200, headers: map[string]string{}}
	if a := f.vm.OnRequestHeaders(id, len(headers), true); a == ActionPause {
		if h.local == nil {
			panic("paused without a local response")
		}
		res.status, res.details, res.headers, res.body = h.local.status, h.local.details, h.local.headers, h.local.body
	} else {
		if h.local != nil {
			panic("local response but continued")
		}
		f.vm.OnResponseHeaders(id, 0, true)
		for _, kv := range h.respHeaders {
			res.headers[kv[0]] = kv[1]
		}
	}
	if !f.vm.OnDone(id) {
		panic("not done")
	}
	f.vm.OnDelete(id)
	return res
}
