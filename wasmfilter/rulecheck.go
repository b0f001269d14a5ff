package wasmfilter

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/bucketgrid/bucketgrid/core/wire"
	rules "github.com/bucketgrid/bucketgrid/policy"
)

// attributes are the request values Envoy's rate-limit actions read, from
// the host; the first host failure (other than an absent value) is kept.
// Unless raw, :path is normalised (normalizePath); badPath reports that it
// was refused.
type attributes struct {
	host    Host
	err     error
	raw     bool
	badPath bool
}

func (a *attributes) Header(name string) (string, bool) {
	v, found, err := a.host.Header(RequestHeaders, name)
	if err != nil && !errors.Is(err, StatusNotFound) && a.err == nil {
		a.err = err
	}
	found = found && err == nil
	if found && name == ":path" && !a.raw {
		if v, found = normalizePath(v); !found {
			a.badPath = true
		}
	}
	return v, found
}

func (a *attributes) RemoteAddress() (string, bool) {
	v, found, err := a.host.Property("source", "address")
	if err != nil && !errors.Is(err, StatusNotFound) && a.err == nil {
		a.err = err
	}
	if !found || err != nil || len(v) == 0 || v[0] == '/' { // a pipe has no IP
		return "", false
	}
	return hostOf(string(v)), true
}

// Check rate-limits the current request as the rate-limit service would
// answer Envoy's rate-limit filter: one descriptor per rate_limits entry
// whose actions all apply, every descriptor planned, run on its bucket and
// decided by package policy (a fixed window counts refused hits, as
// envoyproxy/ratelimit does), the request refused when any descriptor is
// over the limit. A refused request is answered locally (429) with
// ActionPause; an admitted one continues, and pending are the headers for
// its response. A failure to decide follows failure_mode (see failure).
func (p *Plugin) Check() (a Action, pending [][2]string) {
	set, m := p.set, &p.set.metrics
	attrs := attributes{host: p.host, raw: set.rawPath}
	req := rules.Request{Domain: set.domain}
	for _, acts := range set.limits {
		if entries, ok := entriesOf(acts, &attrs); ok {
			req.Descriptors = append(req.Descriptors, rules.Descriptor{Entries: entries})
		}
	}
	if attrs.err != nil {
		if r, pass := p.failure(attrs.err); !pass {
			return p.refuse(r), nil
		}
		return ActionContinue, nil
	}
	if attrs.badPath {
		m.add(p.host, metricInvalidPath, 1)
		return p.refuse(refusal{status: 400, details: "bucketgrid_ambiguous_path"}), nil
	}
	if len(req.Descriptors) == 0 {
		return ActionContinue, nil // Envoy asks nothing either
	}
	// the service's keys fit 200 bytes, a slot 128; every refusal carries
	// Retry-After, as Envoy's rate-limit filter answers one
	plan, err := set.rules.Plan(&req, &rules.Settings{Headers: set.headers | rules.RetryAfterHeader, MaxKeyBytes: MaxKeyLen})
	if err != nil {
		// the client's values make the request unusable (a descriptor
		// over MaxDescriptorBytes): refused, as the service answers it
		m.add(p.host, metricOverLimit, 1)
		return p.refuseRules(nil), nil
	}
	outcomes := make([]rules.Outcome, len(plan.Batches))
	for i := range plan.Batches {
		res, err := p.runBatch(&plan.Batches[i])
		if err != nil {
			if r, pass := p.failure(err); !pass {
				return p.refuse(r), nil
			}
			outcomes[i].Skipped = true // let through without this descriptor
			continue
		}
		outcomes[i].Results = res
	}
	d, err := plan.Decide(outcomes, time.Unix(0, p.host.Now()))
	if err != nil {
		if r, pass := p.failure(err); !pass {
			return p.refuse(r), nil
		}
		return ActionContinue, nil
	}
	if d.Code == rules.OverLimit {
		m.add(p.host, metricOverLimit, 1)
		return p.refuseRules(d.Headers), nil
	}
	m.add(p.host, metricOK, 1)
	for _, h := range d.Headers {
		pending = append(pending, [2]string{h.Name, h.Value})
	}
	return ActionContinue, pending
}

// runBatch runs b on its bucket, created from its configuration when
// absent.
func (p *Plugin) runBatch(b *rules.Batch) ([]wire.Result, error) {
	req := wire.Request{Mode: wire.ModeCreateIfAbsent, Config: &b.Config, Ops: b.Ops,
		Expiry: wire.Expiry{Kind: wire.ExpireAfterRefill}}
	exec, m := p.exec, &p.set.metrics
	conflicts, evicted := exec.Stats().Conflicts, p.store.Evictions()
	resp, err := exec.Execute(context.Background(), b.Key, req)
	m.add(p.host, metricCASConflict, exec.Stats().Conflicts-conflicts)
	m.add(p.host, metricEvicted, int64(p.store.Evictions()-evicted))
	if err != nil {
		return nil, err
	}
	if err := resp.Err(); err != nil {
		return nil, err
	}
	if resp.Status != wire.StatusOK {
		return nil, errors.New("unexpected status " + resp.Status.String())
	}
	return resp.Results, nil
}

// refuseRules answers 429 with the rules' headers (Retry-After among them)
// and x-envoy-ratelimited, as Envoy's rate-limit filter answers an
// OVER_LIMIT.
func (p *Plugin) refuseRules(headers []rules.Header) Action {
	hdrs := [][2]string{{"x-envoy-ratelimited", "true"}}
	for _, h := range headers {
		hdrs = append(hdrs, [2]string{h.Name, h.Value})
	}
	hdrs = append(hdrs, [2]string{"content-type", p.set.contentType})
	if err := p.host.SendLocalResponse(429, "bucketgrid_rate_limited", p.set.body, hdrs); err != nil {
		p.host.Log(LogError, "bucketgrid: sending the local response: "+err.Error())
	}
	return ActionPause
}

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
