package wasmfilter

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/core/wire"
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
	v.host.Log(LogInfo, "bucketgrid: configured "+strconv.Itoa(len(p.set.policies))+" policies")
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

// Plugin is one plugin (root) context of the filter: its policies and the
// executors over the stores holding their buckets. VM creates plugins as the
// host creates root contexts.
type Plugin struct {
	host   Host
	set    *settings
	execs  []*cas.Executor // one per policy
	stores []*Store

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
// defines the metrics and prepares every policy's slot table. On error the
// plugin keeps its previous configuration.
func (p *Plugin) Configure(raw []byte) error {
	c, err := decodeConfig(raw)
	if err != nil {
		return err
	}
	set, err := c.compile()
	if err != nil {
		return err
	}
	execs := make([]*cas.Executor, len(set.policies))
	stores := make([]*Store, len(set.policies))
	clk := hostClock(p.host)
	for i := range set.policies {
		pol := &set.policies[i]
		if err := pol.metrics.define(p.host); err != nil {
			p.host.Log(LogWarn, "bucketgrid: policy "+pol.name+": defining metrics: "+err.Error())
		}
		store := NewStore(p.host, set.prefix+"/"+pol.name,
			StoreConfig{Slots: pol.slots, EvictOldest: set.tableFull == tableFullEvict, Cost: pol.cost, Clock: clk})
		if err := store.Prepare(); err != nil {
			// Not fatal: unprepared entries are created on first use.
			p.host.Log(LogWarn, "bucketgrid: policy "+pol.name+": preparing shared data: "+err.Error())
		}
		stores[i], execs[i] = store, newExecutor(store, clk, set.maxAttempts)
	}
	p.set, p.execs, p.stores = set, execs, stores
	return nil
}

// outcome is the answer of one policy.
type outcome struct {
	pol       *policy
	idx       int    // index of pol
	key       string // bucket key, for a refund
	ok        bool
	remaining int64 // tokens: the minimum over bandwidths
	wait      int64 // ns until the request could succeed
	reset     int64 // ns until the bucket is full
	bands     []bandState
}

// refusal is why a request is answered locally: a policy's rejection, or a
// failure to decide.
type refusal struct {
	status  int
	details string
	retry   int64 // Retry-After seconds; 0 for none
}

// Check rate-limits the current request: it consumes from the bucket of
// every matching policy, in order, and stops at the first refusal. A refused
// request is answered locally (429, or 400 for a key the store cannot hold)
// with ActionPause, and the policies before the refusing one get their
// tokens back: a refused request costs nothing. An admitted one continues,
// and pending are the headers for its response.
func (p *Plugin) Check() (a Action, pending [][2]string) {
	if p.set.rules != nil {
		return p.checkRules()
	}
	path := p.path()
	var outs []outcome
	for i := range p.set.policies {
		pol := &p.set.policies[i]
		if !strings.HasPrefix(path, pol.pathPrefix) {
			continue
		}
		o, err := p.check(i, pol, path)
		if err != nil {
			r, pass := p.failure(pol, err)
			if pass {
				continue
			}
			return p.refuse(outs, nil, r), nil
		}
		if !o.ok {
			pol.metrics.add(p.host, metricOverLimit, 1)
			return p.refuse(outs, &o, refusal{status: 429, details: "bucketgrid_rate_limited",
				retry: max(1, ceilSeconds(o.wait))}), nil
		}
		outs = append(outs, o)
	}
	for i := range outs {
		outs[i].pol.metrics.add(p.host, metricOK, 1)
	}
	return ActionContinue, p.headers(outs, nil)
}

// path returns :path as the configuration reads it.
func (p *Plugin) path() string {
	path, _, _ := p.host.Header(RequestHeaders, ":path")
	if p.set.normalize {
		return normalizePath(path, p.set.foldCase)
	}
	if p.set.foldCase {
		return strings.ToLower(path)
	}
	return path
}

// failure decides what an error of pol's check does: pass reports that the
// request goes on without this policy; otherwise r is the refusal. Every
// case is counted and logged without the key.
func (p *Plugin) failure(pol *policy, err error) (r refusal, pass bool) {
	prefix := "bucketgrid: policy " + pol.name + ": "
	full, isFull := as[*TableFullError](err)
	switch {
	case errors.Is(err, core.ErrInvalidKey):
		pol.metrics.add(p.host, metricInvalidKey, 1)
		return refusal{status: 400, details: "bucketgrid_invalid_key"}, false
	case isFull:
		pol.metrics.add(p.host, metricTableFull, 1)
		slots := strconv.FormatUint(uint64(pol.slots), 10)
		if p.set.tableFull == tableFullAllow {
			pol.metrics.add(p.host, metricTableFullAllowed, 1)
			p.logLimited(LogWarn, prefix+"slot table full ("+slots+" slots): new client allowed without a limit (table_full allow)")
			return r, true
		}
		why := "table_full reject"
		if p.set.tableFull == tableFullEvict {
			why = "nothing to evict: every probed slot holds another build's record"
		}
		p.logLimited(LogWarn, prefix+"slot table full ("+slots+" slots): new client rejected ("+why+")")
		return refusal{status: 429, details: "bucketgrid_table_full", retry: max(1, ceilSeconds(int64(full.Wait)))}, false
	case errors.Is(err, cas.ErrConflict):
		pol.metrics.add(p.host, metricCASGaveUp, 1)
		p.logLimited(LogWarn, prefix+"gave up after "+strconv.Itoa(p.set.maxAttempts)+" lost compare-and-swap races: request rejected")
		return refusal{status: 429, details: "bucketgrid_contention", retry: 1}, false
	}
	pol.metrics.add(p.host, metricError, 1)
	if p.set.failOpen {
		pol.metrics.add(p.host, metricFailureModeAllowed, 1)
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

func (p *Plugin) check(i int, pol *policy, path string) (outcome, error) {
	key, err := p.key(pol, path)
	if err != nil {
		return outcome{}, err
	}
	req := wire.Request{
		Mode:          wire.ModeCreateOrReplace,
		Ops:           []wire.Op{{Kind: wire.OpTryConsumeAndReturnRemaining, Tokens: pol.cost}},
		Config:        &pol.config,
		ConfigVersion: pol.version,
		Inheritance:   core.InheritProportionally,
		Expiry:        wire.Expiry{Kind: wire.ExpireAfterRefill},
		Verbose:       p.set.headers.IETF || p.set.headers.XRateLimit,
	}
	exec := p.execs[i]
	conflicts, evicted := exec.Stats().Conflicts, p.stores[i].Evictions()
	resp, err := exec.Execute(context.Background(), key, req)
	pol.metrics.add(p.host, metricCASConflict, exec.Stats().Conflicts-conflicts)
	pol.metrics.add(p.host, metricEvicted, int64(p.stores[i].Evictions()-evicted))
	if err != nil {
		return outcome{}, err
	}
	if err := resp.Err(); err != nil || resp.Status != wire.StatusOK || len(resp.Results) != 1 {
		if err == nil {
			err = errors.New("unexpected status " + resp.Status.String())
		}
		return outcome{}, err
	}
	r := resp.Results[0]
	return outcome{pol: pol, idx: i, key: key, ok: r.OK, remaining: max(r.Tokens, 0), wait: r.Wait, reset: r.Reset,
		bands: bandStates(pol, resp.Diagnostics, p.host.Now())}, nil
}

// refuse answers the request locally as r says, after giving the tokens of
// the admitted policies back. rejected is the outcome of the policy whose
// bucket rejected the request, nil when the refusal is a failure to decide;
// the headers describe the admitted policies and the rejecting one.
func (p *Plugin) refuse(admitted []outcome, rejected *outcome, r refusal) Action {
	for i := range admitted {
		p.refund(&admitted[i])
	}
	outs := admitted
	if rejected != nil {
		outs = append(outs, *rejected)
	}
	var hdrs [][2]string
	if r.retry > 0 {
		hdrs = append(hdrs, [2]string{"retry-after", strconv.FormatInt(r.retry, 10)})
	}
	body, ct := p.set.body, p.set.contentType
	if r.status == 429 {
		hdrs = append(hdrs, [2]string{"x-envoy-ratelimited", "true"})
		hdrs = p.headers(outs, hdrs)
	} else {
		body, ct = []byte("invalid rate-limit key\n"), "text/plain"
	}
	hdrs = append(hdrs, [2]string{"content-type", ct})
	if err := p.host.SendLocalResponse(r.status, r.details, body, hdrs); err != nil {
		p.host.Log(LogError, "bucketgrid: sending the local response: "+err.Error())
	}
	return ActionPause
}

// refund gives an admitted policy's tokens back (capped at capacity) when a
// later policy refused the request, and updates the outcome's state. A
// failed refund is only logged: the tokens then come back by refill.
func (p *Plugin) refund(o *outcome) {
	req := wire.Request{Mode: wire.ModeBare, Verbose: true,
		Ops: []wire.Op{{Kind: wire.OpAddTokens, Tokens: o.pol.cost}}}
	resp, err := p.execs[o.idx].Execute(context.Background(), o.key, req)
	if err != nil {
		p.logLimited(LogWarn, "bucketgrid: policy "+o.pol.name+": refund: "+describe(err))
		return
	}
	if d := resp.Diagnostics; d != nil && len(d.Available) > 0 {
		o.remaining, o.reset = max(slices.Min(d.Available), 0), int64(d.TimeToFull)
		o.bands = bandStates(o.pol, d, p.host.Now())
	}
}

// newExecutor returns the compare-and-swap executor over store, with bounded
// immediate retries: a proxy-wasm VM cannot sleep (no other code of the VM
// runs while it would), so the only contenders are the other worker VMs and
// spinning a few times is the right answer. A VM runs one request at a time,
// so there is nothing to coalesce: batching would only cost allocations.
func newExecutor(store *Store, c clock.Clock, maxAttempts int) *cas.Executor {
	return cas.New(store, cas.WithRetry(retry.Immediate(maxAttempts)), cas.WithClock(c), cas.WithoutBatching())
}
