package wasmfilter

import (
	"errors"
	"strconv"
	"time"

	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/internal/header"
	"github.com/bucketgrid/bucketgrid/retry"
)

// VM is the filter as one proxy-wasm VM sees it: it tracks the plugin (root)
// contexts and the stream contexts created under them, and dispatches the
// ABI callbacks. The wasip1 binding forwards every proxy_on_* export to the
// VM's method of the same name; tests drive a VM on a fake Host through the
// very same sequence. A VM is not safe for concurrent use: a proxy-wasm host
// calls a VM from one thread.
type VM struct {
	host    Host
	plugins map[uint32]*Plugin
	streams map[uint32]*stream
}

// stream is the state of one HTTP stream context.
type stream struct {
	plugin *Plugin
	// pending are the headers to add to the upstream response.
	pending [][2]string
}

// NewVM returns a VM talking to host.
func NewVM(host Host) *VM {
	return &VM{host: host, plugins: map[uint32]*Plugin{}, streams: map[uint32]*stream{}}
}

// OnContextCreate implements proxy_on_context_create: a parent of 0 creates a
// plugin context, any other a stream of that plugin.
func (v *VM) OnContextCreate(id, parent uint32) {
	if parent == 0 {
		v.plugins[id] = &Plugin{host: v.host}
		return
	}
	v.streams[id] = &stream{plugin: v.plugins[parent]}
}

// OnVMStart implements proxy_on_vm_start. The VM configuration is unused.
func (v *VM) OnVMStart(id uint32, size int) bool { return true }

// OnConfigure implements proxy_on_configure: it reads the plugin
// configuration and reports false, with the reason logged, when it is
// invalid; Envoy then refuses to start the plugin.
func (v *VM) OnConfigure(id uint32, size int) bool {
	p := v.plugins[id]
	if p == nil {
		p = &Plugin{host: v.host}
		v.plugins[id] = p
	}
	raw, err := v.host.PluginConfiguration()
	if err != nil && !errors.Is(err, StatusNotFound) {
		v.host.Log(LogError, "bucketgrid: reading the plugin configuration: "+err.Error())
		return false
	}
	if err := p.Configure(raw); err != nil {
		// "wasmfilter: invalid plugin configuration: <path>: <what>", once.
		v.host.Log(LogError, err.Error())
		return false
	}
	v.host.Log(LogInfo, "bucketgrid: configured "+strconv.Itoa(len(p.set.limits))+" rate_limits of domain "+p.set.domain)
	return true
}

// OnRequestHeaders implements proxy_on_request_headers.
func (v *VM) OnRequestHeaders(id uint32, numHeaders int, endOfStream bool) Action {
	s := v.streams[id]
	if s == nil || s.plugin == nil || s.plugin.set == nil {
		return ActionContinue
	}
	var a Action
	a, s.pending = s.plugin.Check()
	return a
}

// OnResponseHeaders implements proxy_on_response_headers: it adds the
// rate-limit headers of an admitted request to the upstream response.
func (v *VM) OnResponseHeaders(id uint32, numHeaders int, endOfStream bool) Action {
	s := v.streams[id]
	if s == nil {
		return ActionContinue
	}
	for _, h := range s.pending {
		if err := v.host.AddHeader(ResponseHeaders, h[0], h[1]); err != nil {
			v.host.Log(LogWarn, "bucketgrid: adding "+h[0]+": "+err.Error())
		}
	}
	s.pending = nil
	return ActionContinue
}

// OnDone implements proxy_on_done; the filter never defers completion.
func (v *VM) OnDone(id uint32) bool { return true }

// OnDelete implements proxy_on_delete: the context's state is dropped.
func (v *VM) OnDelete(id uint32) {
	delete(v.streams, id)
	delete(v.plugins, id)
}

// Plugin is one plugin (root) context of the filter: its rules and the
// executor over the store holding their buckets. VM creates plugins as the
// host creates root contexts.
type Plugin struct {
	host  Host
	set   *settings
	exec  *cas.Executor
	store *Store

	// Per-request failures are logged at most once a second, with a count
	// of the ones suppressed: an outage must not flood Envoy's log. Log
	// lines never contain a bucket key or any part of one.
	lastLog    int64
	suppressed int
}

// logLimited logs msg unless a message was logged less than a second ago.
func (p *Plugin) logLimited(level LogLevel, msg string) {
	now := p.host.Now()
	if p.lastLog != 0 && now-p.lastLog < int64(time.Second) && now >= p.lastLog {
		p.suppressed++
		return
	}
	if p.suppressed > 0 {
		msg += " (" + strconv.Itoa(p.suppressed) + " similar messages suppressed)"
	}
	p.lastLog, p.suppressed = now, 0
	p.host.Log(level, msg)
}

// Configure parses and applies a plugin configuration (see Config): it
// defines the metrics and prepares the slot table. On error the plugin
// keeps its previous configuration.
func (p *Plugin) Configure(raw []byte) error {
	c, err := decodeConfig(raw)
	if err != nil {
		return err
	}
	set, err := c.compile()
	if err != nil {
		return err
	}
	if err := set.metrics.define(p.host); err != nil {
		p.host.Log(LogWarn, "bucketgrid: defining metrics: "+err.Error())
	}
	clk := hostClock(p.host)
	store := NewStore(p.host, set.prefix+"/"+tableName,
		StoreConfig{Slots: set.slots, EvictOldest: set.tableFull == tableFullEvict, Clock: clk})
	if err := store.Prepare(); err != nil {
		// Not fatal: unprepared entries are created on first use.
		p.host.Log(LogWarn, "bucketgrid: preparing shared data: "+err.Error())
	}
	p.set, p.store, p.exec = set, store, newExecutor(store, clk, set.maxAttempts)
	return nil
}

// refusal is why a request is answered locally: a failure to decide.
type refusal struct {
	status  int
	details string
	retry   int64 // Retry-After seconds; 0 for none
}

// failure decides what an error of a check does: pass reports that the
// request goes on without the descriptor; otherwise r is the refusal. Every
// case is counted and logged without the key.
func (p *Plugin) failure(err error) (r refusal, pass bool) {
	const prefix = "bucketgrid: "
	m := &p.set.metrics
	full, isFull := as[*TableFullError](err)
	switch {
	case errors.Is(err, core.ErrInvalidKey):
		m.add(p.host, metricInvalidKey, 1)
		return refusal{status: 400, details: "bucketgrid_invalid_key"}, false
	case isFull:
		m.add(p.host, metricTableFull, 1)
		slots := strconv.FormatUint(uint64(p.set.slots), 10)
		if p.set.tableFull == tableFullAllow {
			m.add(p.host, metricTableFullAllowed, 1)
			p.logLimited(LogWarn, prefix+"slot table full ("+slots+" slots): new client allowed without a limit (table_full allow)")
			return r, true
		}
		why := "table_full reject"
		if p.set.tableFull == tableFullEvict {
			why = "nothing to evict: every probed slot holds another build's record"
		}
		p.logLimited(LogWarn, prefix+"slot table full ("+slots+" slots): new client rejected ("+why+")")
		return refusal{status: 429, details: "bucketgrid_table_full", retry: max(1, header.Seconds(full.Wait))}, false
	case errors.Is(err, cas.ErrConflict):
		m.add(p.host, metricCASGaveUp, 1)
		p.logLimited(LogWarn, prefix+"gave up after "+strconv.Itoa(p.set.maxAttempts)+" lost compare-and-swap races: request rejected")
		return refusal{status: 429, details: "bucketgrid_contention", retry: 1}, false
	}
	m.add(p.host, metricError, 1)
	if p.set.failOpen {
		m.add(p.host, metricFailureModeAllowed, 1)
		p.logLimited(LogError, prefix+describe(err)+": request allowed (failure_mode open)")
		return r, true
	}
	p.logLimited(LogError, prefix+describe(err)+": request rejected (failure_mode closed)")
	return refusal{status: 429, details: "bucketgrid_failure", retry: 1}, false
}

// describe says what failed in terms that never include a key: the host's
// status, or the kind of failure.
func describe(err error) string {
	st, isStatus := as[Status](err)
	switch {
	case isStatus:
		return "shared data failed (" + st.Error() + ")"
	case errors.Is(err, errCorruptRecord):
		return "corrupt shared-data directory"
	case errors.Is(err, core.ErrCorruptState):
		return "corrupt bucket state"
	}
	return "bucket check failed"
}

// refuse answers the request locally as r says.
func (p *Plugin) refuse(r refusal) Action {
	var hdrs [][2]string
	if r.retry > 0 {
		hdrs = append(hdrs, [2]string{"retry-after", strconv.FormatInt(r.retry, 10)})
	}
	body, ct := p.set.body, p.set.contentType
	switch {
	case r.status == 429:
		hdrs = append(hdrs, [2]string{"x-envoy-ratelimited", "true"})
	case r.details == "bucketgrid_ambiguous_path":
		body, ct = []byte("ambiguous request path\n"), "text/plain"
	default:
		body, ct = []byte("invalid rate-limit key\n"), "text/plain"
	}
	hdrs = append(hdrs, [2]string{"content-type", ct})
	if err := p.host.SendLocalResponse(r.status, r.details, body, hdrs); err != nil {
		p.host.Log(LogError, "bucketgrid: sending the local response: "+err.Error())
	}
	return ActionPause
}

// newExecutor returns the compare-and-swap executor over store, with bounded
// immediate retries: a proxy-wasm VM cannot sleep (no other code of the VM
// runs while it would), so the only contenders are the other worker VMs and
// spinning a few times is the right answer. A VM runs one request at a time,
// so there is nothing to coalesce: batching would only cost allocations.
func newExecutor(store *Store, c clock.Clock, maxAttempts int) *cas.Executor {
	return cas.New(store, cas.WithRetry(retry.Immediate(maxAttempts)), cas.WithClock(c), cas.WithoutBatching())
}
