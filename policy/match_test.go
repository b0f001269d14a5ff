package policy_test

import (
	"testing"

	. "github.com/bucketgrid/bucketgrid/policy"
)

// shop is a configuration with every matching feature.
var shop = yml(`
	|domain: shop
	|descriptors:
	|  # key only: every value shares the rule, each value its own bucket
	|  - key: client
	|    rate_limit: {unit: minute, requests_per_unit: 10}
	|  # key and value beats key only
	|  - key: client
	|    value: vip
	|    rate_limit: {unit: minute, requests_per_unit: 1000}
	|  # wildcards, first match in file order; exact values first
	|  - key: path
	|    value: /api/*
	|    rate_limit: {unit: second, requests_per_unit: 50}
	|  - key: path
	|    value: /api/v2/*
	|    rate_limit: {unit: second, requests_per_unit: 99}
	|  - key: path
	|    value: /api/health
	|    rate_limit: {unlimited: true}
	|  - key: path
	|    rate_limit: {unit: second, requests_per_unit: 5}
	|  # nested: a limit applies only at the descriptor's depth
	|  - key: tenant
	|    rate_limit: {unit: hour, requests_per_unit: 100}
	|    descriptors:
	|      - key: user
	|        rate_limit: {unit: minute, requests_per_unit: 7, name: per_user}
	|      - key: user
	|        value: admin
	|        shadow_mode: true
	|        rate_limit: {unit: minute, requests_per_unit: 1}
	|  - key: tenant
	|    value: acme
	|    descriptors:
	|      - key: user
	|        quota_mode: true
	|        rate_limit: {unit: minute, requests_per_unit: 70}
	|  # intermediate node without a limit
	|  - key: region
	|    descriptors:
	|      - key: zone
	|        descriptors:
	|          - key: rack
	|            rate_limit: {unit: day, requests_per_unit: 3}
	|  - key: blocked
	|    rate_limit: {unit: second, requests_per_unit: 0}`)

func TestMatch(t *testing.T) {
	c := load(t, Options{}, shop)
	type want struct {
		ok     bool
		n      uint32
		unit   Unit
		path   string
		shadow bool
		quota  bool
		unlim  bool
	}
	for _, tc := range []struct {
		name    string
		domain  string
		entries []Entry
		want    want
	}{
		{"key only", "shop", []Entry{{"client", "alice"}}, want{ok: true, n: 10, unit: Minute, path: "shop.client"}},
		{"key only, empty value", "shop", []Entry{{"client", ""}}, want{ok: true, n: 10, unit: Minute, path: "shop.client"}},
		{"key and value first", "shop", []Entry{{"client", "vip"}}, want{ok: true, n: 1000, unit: Minute, path: "shop.client_vip"}},
		{"value is case-sensitive", "shop", []Entry{{"client", "VIP"}}, want{ok: true, n: 10, unit: Minute, path: "shop.client"}},
		{"wildcard", "shop", []Entry{{"path", "/api/users"}}, want{ok: true, n: 50, unit: Second, path: "shop.path_/api/*"}},
		{"wildcard matches the bare prefix", "shop", []Entry{{"path", "/api/"}}, want{ok: true, n: 50, unit: Second, path: "shop.path_/api/*"}},
		{"first wildcard in file order wins", "shop", []Entry{{"path", "/api/v2/x"}}, want{ok: true, n: 50, unit: Second, path: "shop.path_/api/*"}},
		{"exact value beats wildcard", "shop", []Entry{{"path", "/api/health"}}, want{ok: true, unlim: true, path: "shop.path_/api/health"}},
		{"no wildcard match falls back to the key", "shop", []Entry{{"path", "/static/a.css"}}, want{ok: true, n: 5, unit: Second, path: "shop.path"}},
		{"nested first level", "shop", []Entry{{"tenant", "t1"}}, want{ok: true, n: 100, unit: Hour, path: "shop.tenant"}},
		{"nested second level", "shop", []Entry{{"tenant", "t1"}, {"user", "bob"}}, want{ok: true, n: 7, unit: Minute, path: "shop.tenant.user"}},
		{"nested shadow", "shop", []Entry{{"tenant", "t1"}, {"user", "admin"}}, want{ok: true, n: 1, unit: Minute, path: "shop.tenant.user_admin", shadow: true}},
		{"nested most specific parent", "shop", []Entry{{"tenant", "acme"}, {"user", "bob"}}, want{ok: true, n: 70, unit: Minute, path: "shop.tenant_acme.user", quota: true}},
		{"parent without limit at its depth", "shop", []Entry{{"tenant", "acme"}}, want{}},
		{"deeper than the tree", "shop", []Entry{{"tenant", "t1"}, {"user", "bob"}, {"device", "d"}}, want{}},
		{"shallower than the limit", "shop", []Entry{{"region", "eu"}, {"zone", "a"}}, want{}},
		{"three levels", "shop", []Entry{{"region", "eu"}, {"zone", "a"}, {"rack", "r1"}}, want{ok: true, n: 3, unit: Day, path: "shop.region.zone.rack"}},
		{"wrong order", "shop", []Entry{{"user", "bob"}, {"tenant", "t1"}}, want{}},
		{"unknown key", "shop", []Entry{{"color", "red"}}, want{}},
		{"unknown domain", "other", []Entry{{"client", "alice"}}, want{}},
		{"no entries", "shop", nil, want{}},
		{"zero requests", "shop", []Entry{{"blocked", "x"}}, want{ok: true, n: 0, unit: Second, path: "shop.blocked"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, ok := c.Match(tc.domain, tc.entries, nil)
			got := want{ok: ok, n: r.RequestsPerUnit, unit: r.Unit, path: r.Path, shadow: r.ShadowMode, quota: r.QuotaMode, unlim: r.Unlimited}
			if got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestMatchOverride(t *testing.T) {
	c := load(t, Options{Algorithm: TokenBucket}, shop)
	o := &Override{RequestsPerUnit: 42, Unit: Hour}
	// an override applies whether or not the tree matches, in a known domain
	for _, entries := range [][]Entry{{{"client", "alice"}}, {{"color", "red"}, {"shade", ""}}} {
		r, ok := c.Match("shop", entries, o)
		if !ok || !r.IsOverride() || r.RequestsPerUnit != 42 || r.Unit != Hour || r.ShadowMode || r.Algorithm != TokenBucket {
			t.Fatalf("%v: %+v %v", entries, r, ok)
		}
	}
	es := []Entry{{"color", "red"}, {"shade", ""}}
	r, _ := c.Match("shop", es, o)
	if key, values := c.StatsKey("shop", es, &r); key != "shop.color_red.shade" || r.Path != "override:shop.color.shade" || !values {
		t.Fatalf("override keys: %q %q", key, r.Path)
	}
	if _, ok := c.Match("other", []Entry{{"client", "alice"}}, o); ok {
		t.Fatal("override in an unknown domain matched")
	}
}

// TestStatsKeys follows envoyproxy/ratelimit's naming of a rule's stats:
// the configuration path, values only where the file says so.
func TestStatsKeys(t *testing.T) {
	c := load(t, Options{}, yml(`
		|domain: d
		|descriptors:
		|  - key: plain
		|    value: v*
		|    rate_limit: {unit: second, requests_per_unit: 1}
		|  - key: detailed
		|    detailed_metric: true
		|    rate_limit: {unit: second, requests_per_unit: 1}
		|    descriptors:
		|      - key: inner
		|        detailed_metric: true
		|        rate_limit: {unit: second, requests_per_unit: 1}
		|  - key: route
		|    value_to_metric: true
		|    descriptors:
		|      - key: method
		|        value_to_metric: true
		|        descriptors:
		|          - key: subject
		|            rate_limit: {unit: minute, requests_per_unit: 60}
		|  - key: api
		|    value: x*
		|    value_to_metric: true
		|    rate_limit: {unit: minute, requests_per_unit: 1}
		|  - key: shared
		|    value: files/*
		|    share_threshold: true
		|    rate_limit: {unit: minute, requests_per_unit: 1}
		|  - key: sharedv
		|    value: s/*
		|    share_threshold: true
		|    value_to_metric: true
		|    descriptors:
		|      - key: method
		|        rate_limit: {unit: minute, requests_per_unit: 1}
		|  - key: shareddet
		|    value: t/*
		|    share_threshold: true
		|    descriptors:
		|      - key: endpoint
		|        detailed_metric: true
		|        rate_limit: {unit: minute, requests_per_unit: 1}
		|  - key: fixed
		|    value: one
		|    value_to_metric: true
		|    rate_limit: {unit: minute, requests_per_unit: 1}`))
	for _, tc := range []struct {
		name    string
		entries []Entry
		key     string
		values  bool
	}{
		{"wildcard keeps its pattern", []Entry{{"plain", "v123"}}, "d.plain_v*", false},
		{"detailed at the top", []Entry{{"detailed", "abc"}}, "d.detailed_abc", true},
		{"detailed nested", []Entry{{"detailed", "abc"}, {"inner", "x"}}, "d.detailed_abc.inner_x", true},
		{"value_to_metric at every level", []Entry{{"route", "/a"}, {"method", "GET"}, {"subject", "s1"}}, "d.route_/a.method_GET.subject", true},
		{"value_to_metric on a wildcard", []Entry{{"api", "x42"}}, "d.api_x42", true},
		{"share_threshold keeps the pattern", []Entry{{"shared", "files/a.txt"}}, "d.shared_files/*", false},
		{"share_threshold beats value_to_metric", []Entry{{"sharedv", "s/1"}, {"method", "PUT"}}, "d.sharedv_s/*.method", false},
		{"share_threshold in a detailed key", []Entry{{"shareddet", "t/9"}, {"endpoint", "e1"}}, "d.shareddet_t/*.endpoint_e1", true},
		{"value_to_metric on an exact value", []Entry{{"fixed", "one"}}, "d.fixed_one", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, ok := c.Match("d", tc.entries, nil)
			if !ok {
				t.Fatal("no match")
			}
			if key, values := c.StatsKey("d", tc.entries, &r); key != tc.key || values != tc.values {
				t.Fatalf("stats key %q (values %v), want %q (%v)", key, values, tc.key, tc.values)
			}
		})
	}
}
