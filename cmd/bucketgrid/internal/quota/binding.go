package quota

import (
	"slices"
	"strings"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"

	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/policy"
)

// bindingKind says how a bucket id is answered.
type bindingKind uint8

const (
	// allowAll: no rule limits the bucket (unmatched, replaced, unlimited,
	// shadow mode): a blanket ALLOW_ALL, as the RLS answers OK.
	allowAll bindingKind = iota
	// denyAll: a limit of 0, or a bucket id the rules refuse (too large,
	// not UTF-8): a blanket DENY_ALL, never an error Envoy could fail open on.
	denyAll
	// limited: the Envoys reporting the bucket share the grid bucket of key.
	limited
)

// binding is what a bucket id maps to under one configuration.
type binding struct {
	kind bindingKind
	key  string      // limited: the grid bucket's key, the RLS's own
	cfg  core.Config // limited: the grid bucket's configuration
	// perPeriod is the tokens the rule refills in one period, at least 1
	perPeriod int64
	// window: a fixed-window rule, whose bucket's last reserved tokens mean
	// "over the limit" (policy.Rule.Reserved)
	window   bool
	reserved int64
	// fillTime is how long the token bucket takes to refill from empty to
	// full (0 for a fixed window, refilled at its boundaries): the pool
	// must take its refill at least that often, or the bucket's cap loses it
	fillTime int64
	path     string // the rule's configuration path, for logs
}

// maxPermuted is the most bucket id entries whose every order is tried
// against the rules (4! = 24 matches, once per subscription); larger ids are
// matched in key order only.
const maxPermuted = 4

// bind maps a bucket id of domain to its binding under cfg. A bucket id is
// an unordered map, a descriptor an ordered list: the entries are tried in
// every order (key order first) and the first order a rule matches wins, so
// a rule file nests the keys in whatever order it likes.
func bind(cfg *policy.Rules, domain string, id map[string]string, period time.Duration) binding {
	if cfg == nil {
		return binding{kind: denyAll}
	}
	entries := make([]policy.Entry, 0, len(id))
	for k, v := range id {
		entries = append(entries, policy.Entry{Key: k, Value: v})
	}
	slices.SortFunc(entries, func(a, b policy.Entry) int { return strings.Compare(a.Key, b.Key) })
	req := policy.Request{Domain: domain, Descriptors: []policy.Descriptor{{}}}
	try := func(es []policy.Entry) (binding, bool) {
		req.Descriptors[0].Entries = es
		plan, err := cfg.Plan(&req, nil)
		if err != nil {
			return binding{kind: denyAll}, true
		}
		var r policy.Rule
		if len(plan.Batches) == 0 {
			// no limit, an unlimited one, or a token bucket of 0
			var ok bool
			if r, ok = cfg.Match(domain, es, nil); !ok {
				return binding{kind: allowAll}, false
			}
			if r.Unlimited {
				return binding{kind: allowAll, path: r.Path}, true
			}
		} else {
			r = *plan.Batches[0].Rule
		}
		if r.ShadowMode || r.QuotaMode {
			return binding{kind: allowAll, path: r.Path}, true
		}
		if r.RequestsPerUnit == 0 {
			return binding{kind: denyAll, path: r.Path}, true
		}
		bt := &plan.Batches[0]
		unit := r.Unit.Duration()
		per := mulDiv(int64(r.RequestsPerUnit), int64(period), int64(unit), false)
		b := binding{kind: limited, key: bt.Key, cfg: bt.Config, perPeriod: max(per, 1),
			window: r.Algorithm == policy.FixedWindow, reserved: r.Reserved(), path: r.Path}
		if !b.window {
			b.fillTime = mulDiv(bt.Config.Bandwidths[0].Capacity, int64(unit), int64(r.RequestsPerUnit), false)
		}
		return b, true
	}
	if len(entries) > maxPermuted {
		b, _ := try(entries)
		return b
	}
	var found binding
	ok := false
	permute(entries, 0, func(es []policy.Entry) bool {
		found, ok = try(es)
		return ok
	})
	if !ok {
		return binding{kind: allowAll}
	}
	return found
}

// permute calls f with every order of es[k:] after es[:k], in lexicographic
// order of the sorted input, until f returns true.
func permute(es []policy.Entry, k int, f func([]policy.Entry) bool) bool {
	if k >= len(es)-1 {
		return f(slices.Clone(es))
	}
	for i := k; i < len(es); i++ {
		// rotate es[i] to position k, keeping the rest in order
		next := slices.Clone(es)
		e := next[i]
		copy(next[k+1:i+1], next[k:i])
		next[k] = e
		if permute(next, k+1, f) {
			return true
		}
	}
	return false
}

// canonical is a bucket id's identity: its entries in key order. Envoy
// hashes the map the same way whatever its order.
func canonical(id *rlqspb.BucketId) string {
	m := id.GetBucket()
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte(0)
		b.WriteString(m[k])
		b.WriteByte(0)
	}
	return b.String()
}
