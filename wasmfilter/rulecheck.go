package wasmfilter

import (
	"context"
	"errors"
	"time"

	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/core/wire"
	rules "github.com/bucketgrid/bucketgrid/policy"
)

// attributes are the request values Envoy's rate-limit actions read, from
// the host; the first host failure (other than an absent value) is kept.
type attributes struct {
	host Host
	err  error
}

func (a *attributes) Header(name string) (string, bool) {
	v, found, err := a.host.Header(RequestHeaders, name)
	if err != nil && !errors.Is(err, StatusNotFound) && a.err == nil {
		a.err = err
	}
	return v, found && err == nil
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

// checkRules rate-limits the current request in the rules mode, as the
// rate-limit service would answer Envoy's rate-limit filter: one descriptor
// per rate_limits entry whose actions all apply, every descriptor planned,
// run on its bucket and decided by package policy (a fixed window counts
// refused hits, as envoyproxy/ratelimit does), the request refused when
// any descriptor is over the limit. A failure to decide follows
// failure_mode, as for a policy.
func (p *Plugin) checkRules() (Action, [][2]string) {
	m, pol := p.set.rules, &p.set.policies[0]
	attrs := attributes{host: p.host}
	req := rules.Request{Domain: m.domain}
	for _, acts := range m.limits {
		if entries, ok := rules.Entries(acts, &attrs); ok {
			req.Descriptors = append(req.Descriptors, rules.Descriptor{Entries: entries})
		}
	}
	if attrs.err != nil {
		if r, pass := p.failure(pol, attrs.err); !pass {
			return p.refuse(nil, nil, r), nil
		}
		return ActionContinue, nil
	}
	if len(req.Descriptors) == 0 {
		return ActionContinue, nil // Envoy asks nothing either
	}
	items, err := m.rules.Plan(&req)
	if err != nil {
		// the client's values make the request unusable (a descriptor
		// over MaxDescriptorBytes): refused, as the service answers it
		pol.metrics.add(p.host, metricOverLimit, 1)
		return p.refuseRules(nil, nil, m), nil
	}
	statuses := make([]rules.Status, len(items))
	now := time.Unix(0, p.host.Now())
	for i := range items {
		res, err := p.runItem(&items[i])
		if err != nil {
			if r, pass := p.failure(pol, err); !pass {
				return p.refuse(nil, nil, r), nil
			}
			items[i].Kind = rules.NoLimit // let through without this descriptor
			res = nil
		}
		if statuses[i], err = items[i].Decide(res, now); err != nil {
			if r, pass := p.failure(pol, err); !pass {
				return p.refuse(nil, nil, r), nil
			}
			items[i].Kind, statuses[i] = rules.NoLimit, rules.Status{Code: rules.OK}
		}
	}
	if code, _ := rules.Overall(statuses, false); code == rules.OverLimit {
		pol.metrics.add(p.host, metricOverLimit, 1)
		return p.refuseRules(items, statuses, m), nil
	}
	pol.metrics.add(p.host, metricOK, 1)
	var pending [][2]string
	for _, h := range rules.ResponseHeaders(items, statuses, m.headers) {
		pending = append(pending, [2]string{h.Name, h.Value})
	}
	return ActionContinue, pending
}

// runItem runs it's operations on its bucket, created from its
// configuration when absent; nil results for an item without a bucket.
func (p *Plugin) runItem(it *rules.Item) ([]wire.Result, error) {
	ops := it.Ops()
	if ops == nil {
		return nil, nil
	}
	cfg := it.BucketConfig()
	// the service's keys fit 200 bytes, a slot 128
	key, _ := core.FitKey(it.Key, MaxKeyLen)
	req := wire.Request{Mode: wire.ModeCreateIfAbsent, Config: &cfg, Ops: ops,
		Expiry: wire.Expiry{Kind: wire.ExpireAfterRefill}}
	exec, pol := p.execs[0], &p.set.policies[0]
	conflicts, evicted := exec.Stats().Conflicts, p.stores[0].Evictions()
	resp, err := exec.Execute(context.Background(), key, req)
	pol.metrics.add(p.host, metricCASConflict, exec.Stats().Conflicts-conflicts)
	pol.metrics.add(p.host, metricEvicted, int64(p.stores[0].Evictions()-evicted))
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
func (p *Plugin) refuseRules(items []rules.Item, statuses []rules.Status, m *rulesMode) Action {
	hdrs := [][2]string{{"x-envoy-ratelimited", "true"}}
	for _, h := range rules.ResponseHeaders(items, statuses, m.headers) {
		hdrs = append(hdrs, [2]string{h.Name, h.Value})
	}
	hdrs = append(hdrs, [2]string{"content-type", p.set.contentType})
	if err := p.host.SendLocalResponse(429, "bucketgrid_rate_limited", p.set.body, hdrs); err != nil {
		p.host.Log(LogError, "bucketgrid: sending the local response: "+err.Error())
	}
	return ActionPause
}
