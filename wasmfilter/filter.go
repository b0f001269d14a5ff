package wasmfilter

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/core"
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
		v.host.Log(LogError, "bucketgrid: "+err.Error())
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
	host  Host
	set   *settings
	execs []*cas.Executor // one per policy

	// Per-request failures are logged at most once a second, with a count
	// of the ones suppressed: an outage must not flood Envoy's log.
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

// Configure parses and applies a plugin configuration (see Config). On
// error the plugin keeps its previous configuration.
func (p *Plugin) Configure(raw []byte) error {
	c, err := ParseConfig(raw)
	if err != nil {
		return err
	}
	set, err := c.compile()
	if err != nil {
		return err
	}
	execs := make([]*cas.Executor, len(set.policies))
	clk := hostClock(p.host)
	for i := range set.policies {
		pol := &set.policies[i]
		store := NewStore(p.host, set.prefix+"/"+pol.name, pol.slots, clk)
		if err := store.Prepare(); err != nil {
			// Not fatal: unprepared slots are created on first use.
			p.host.Log(LogWarn, "bucketgrid: policy "+pol.name+": preparing shared data: "+err.Error())
		}
		execs[i] = newExecutor(store, clk, set.maxAttempts)
	}
	p.set, p.execs = set, execs
	return nil
}

// outcome is the answer of one policy.
type outcome struct {
	pol       *policy
	idx       int    // index of pol
	key       string // bucket key, for a refund
	ok        bool
	remaining int64
	wait      int64 // ns until the request could succeed
	reset     int64 // ns until the bucket is full
}

// Check rate-limits the current request: it consumes from the bucket of
// every matching policy, in order, and stops at the first rejection. A
// rejected request is answered with a local 429 and ActionPause, and the
// policies before the rejecting one get their tokens back: a rejected request
// costs nothing. An admitted one continues, and pending are the headers for
// its response.
func (p *Plugin) Check() (a Action, pending [][2]string) {
	path, _, _ := p.host.Header(RequestHeaders, ":path")
	var outs []outcome
	for i := range p.set.policies {
		pol := &p.set.policies[i]
		if !strings.HasPrefix(path, pol.pathPrefix) {
			continue
		}
		o, err := p.check(i, pol)
		if err != nil {
			if errors.Is(err, cas.ErrConflict) {
				p.logLimited(LogWarn, "bucketgrid: policy "+pol.name+": "+err.Error())
				return p.deny(append(outs, outcome{pol: pol, wait: 1}), true), nil
			}
			p.logLimited(LogError, "bucketgrid: policy "+pol.name+": "+err.Error())
			if p.set.failOpen {
				continue
			}
			return p.deny(append(outs, outcome{pol: pol, wait: 1}), true), nil
		}
		outs = append(outs, o)
		if !o.ok {
			return p.deny(outs, false), nil
		}
	}
	return ActionContinue, p.headers(outs, nil)
}

func (p *Plugin) check(i int, pol *policy) (outcome, error) {
	key, err := p.key(pol)
	if err != nil {
		return outcome{}, err
	}
	req := core.Request{
		Mode:          core.ModeCreateOrReplace,
		Ops:           []core.Op{{Kind: core.OpTryConsumeAndReturnRemaining, Tokens: pol.cost}},
		Config:        &pol.config,
		ConfigVersion: pol.version,
		Inheritance:   core.InheritProportionally,
		Expiry:        core.Expiry{Kind: core.ExpireAfterRefill},
	}
	resp, err := p.execs[i].Execute(context.Background(), key, req)
	if err != nil {
		return outcome{}, err
	}
	if err := resp.Err(); err != nil || resp.Status != core.StatusOK || len(resp.Results) != 1 {
		if err == nil {
			err = errors.New("unexpected status " + resp.Status.String())
		}
		return outcome{}, err
	}
	r := resp.Results[0]
	return outcome{pol: pol, idx: i, key: key, ok: r.OK, remaining: max(r.Tokens, 0), wait: r.Wait, reset: r.Reset}, nil
}

// key builds the bucket key of the request under pol.
func (p *Plugin) key(pol *policy) (string, error) {
	var b strings.Builder
	b.WriteString(pol.name)
	for _, part := range pol.key {
		b.WriteByte(0)
		switch part.kind {
		case keySourceAddress:
			v, found, err := p.host.Property("source", "address")
			if err != nil && !errors.Is(err, StatusNotFound) {
				return "", err
			}
			if found {
				b.WriteString(hostOf(string(v)))
			}
		case keyHeader:
			v, _, err := p.host.Header(RequestHeaders, part.name)
			if err != nil && !errors.Is(err, StatusNotFound) {
				return "", err
			}
			b.WriteString(v)
		}
	}
	key := b.String()
	if len(key) > maxKeyLen {
		// Client-chosen header values can be long, and every slot record
		// holds its key: store a digest instead, collision-resistant so
		// that no client can aim at another's bucket.
		sum := sha256.Sum256([]byte(key))
		key = pol.name + "\x00#" + hex.EncodeToString(sum[:])
	}
	return key, nil
}

// maxKeyLen bounds the key stored in a slot record.
const maxKeyLen = 128

// hostOf strips the port from an Envoy address: "10.0.0.1:5000" →
// "10.0.0.1", "[::1]:5000" → "::1". Other forms are returned unchanged.
func hostOf(addr string) string {
	if strings.HasPrefix(addr, "[") {
		if end := strings.IndexByte(addr, ']'); end > 0 {
			return addr[1:end]
		}
		return addr
	}
	if i := strings.LastIndexByte(addr, ':'); i >= 0 && strings.IndexByte(addr, ':') == i {
		return addr[:i]
	}
	return addr
}

// deny sends the 429. failure marks a rejection that is not a policy's
// answer (contention, or a store failure with fail-closed): it carries
// Retry-After 1 and no quota headers for the failed policy.
func (p *Plugin) deny(outs []outcome, failure bool) Action {
	for i := range outs[:len(outs)-1] {
		p.refund(&outs[i])
	}
	last := outs[len(outs)-1]
	retry := max(1, ceilSeconds(last.wait))
	if failure {
		retry = 1
		outs = outs[:len(outs)-1]
	}
	hdrs := [][2]string{
		{"retry-after", strconv.FormatInt(retry, 10)},
		{"x-envoy-ratelimited", "true"},
		{"content-type", p.set.contentType},
	}
	hdrs = p.headers(outs, hdrs)
	if err := p.host.SendLocalResponse(429, "bucketgrid_rate_limited", p.set.body, hdrs); err != nil {
		p.host.Log(LogError, "bucketgrid: sending the 429: "+err.Error())
	}
	return ActionPause
}

// refund gives an admitted policy's tokens back (capped at capacity) when a
// later policy rejected the request. A failed refund is only logged: the
// tokens then come back by refill.
func (p *Plugin) refund(o *outcome) {
	req := core.Request{Mode: core.ModeBare, Verbose: true,
		Ops: []core.Op{{Kind: core.OpAddTokens, Tokens: o.pol.cost}}}
	resp, err := p.execs[o.idx].Execute(context.Background(), o.key, req)
	if err != nil {
		p.logLimited(LogWarn, "bucketgrid: policy "+o.pol.name+": refund: "+err.Error())
		return
	}
	if d := resp.Diagnostics; d != nil && len(d.Available) > 0 {
		o.remaining, o.reset = slices.Min(d.Available), int64(d.TimeToFull)
		o.remaining = max(o.remaining, 0)
	}
}

// seconds reports when a policy's quota is back: for an admitted request
// the time until its bucket is full, for a rejected one the time until the
// request could succeed (never less than a second).
func (o *outcome) seconds() int64 {
	if o.ok {
		return ceilSeconds(o.reset)
	}
	return max(1, ceilSeconds(o.wait))
}

// headers appends the configured rate-limit headers describing outs.
func (p *Plugin) headers(outs []outcome, dst [][2]string) [][2]string {
	if len(outs) == 0 {
		return dst
	}
	if p.set.headers.IETF {
		var pol, rl strings.Builder
		for i := range outs {
			o := &outs[i]
			if i > 0 {
				pol.WriteString(", ")
				rl.WriteString(", ")
			}
			// Policy names are restricted to characters that need no
			// escaping in a structured-field string.
			pol.WriteString(`"` + o.pol.name + `";q=` + strconv.FormatInt(o.pol.quota, 10) +
				";w=" + strconv.FormatInt(o.pol.window, 10))
			rl.WriteString(`"` + o.pol.name + `";r=` + strconv.FormatInt(o.remaining, 10) +
				";t=" + strconv.FormatInt(o.seconds(), 10))
		}
		dst = append(dst, [2]string{"ratelimit-policy", pol.String()}, [2]string{"ratelimit", rl.String()})
	}
	if p.set.headers.XRateLimit {
		// The binding policy: the one with the fewest tokens left (a
		// rejected one when there is one).
		b := &outs[0]
		for i := range outs {
			o := &outs[i]
			if (!o.ok && b.ok) || (o.ok == b.ok && o.remaining < b.remaining) {
				b = o
			}
		}
		dst = append(dst,
			[2]string{"x-ratelimit-limit", strconv.FormatInt(b.pol.quota, 10)},
			[2]string{"x-ratelimit-remaining", strconv.FormatInt(b.remaining, 10)},
			[2]string{"x-ratelimit-reset", strconv.FormatInt(b.seconds(), 10)})
	}
	return dst
}

// newExecutor returns the compare-and-swap executor over store, with bounded
// immediate retries: a proxy-wasm VM cannot sleep (no other code of the VM
// runs while it would), so the only contenders are the other worker VMs and
// spinning a few times is the right answer.
func newExecutor(store *Store, c clock.Clock, maxAttempts int) *cas.Executor {
	return cas.New(store, cas.WithRetry(retry.Immediate(maxAttempts)), cas.WithClock(c))
}
