package rulefile

import (
	"errors"
	"strings"
	"testing"

	. "github.com/bucketgrid/bucketgrid/policy"
)

func load(t *testing.T, opts Options, docs ...string) *Rules {
	t.Helper()
	files := make([]File, len(docs))
	for i, d := range docs {
		files[i] = File{Name: "f" + string(rune('0'+i)) + ".yaml", Data: []byte(d)}
	}
	c, err := Load(files, opts)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return c
}

// yml turns the two-space indented, '|'-margined literal into YAML, so the
// tables stay readable.
func yml(s string) string {
	lines := strings.Split(strings.TrimPrefix(s, "\n"), "\n")
	for i, l := range lines {
		if j := strings.IndexByte(l, '|'); j >= 0 {
			lines[i] = l[j+1:]
		}
	}
	return strings.Join(lines, "\n")
}

// TestLoadErrors covers every reason envoyproxy/ratelimit rejects a file,
// with its exact message, and bucketgrid's own additions.
func TestLoadErrors(t *testing.T) {
	okFile := yml(`
		|domain: shop
		|descriptors:
		|  - key: client
		|    rate_limit: {unit: minute, requests_per_unit: 5}`)
	for _, tc := range []struct {
		name  string
		files []string
		merge bool
		want  string
	}{
		{"yaml syntax", []string{"'''\n"},
			false, "f0.yaml: error loading config file: yaml: line 2: found unexpected end of stream"},
		{"tab indentation", []string{"domain: d\n\tdescriptors: x\n"},
			false, "f0.yaml: error loading config file: yaml: line 2: found a tab character that violates indentation"},
		{"document is a list", []string{"- domain: d\n"},
			false, "f0.yaml: error loading config file: yaml: unmarshal errors:\n  line 1: cannot unmarshal !!seq into map[interface {}]interface {}"},
		{"non-string key", []string{"1.5: shop\ndescriptors: []\n"},
			false, "f0.yaml: config error, key is not of type string: 1.5"},
		{"unknown top-level key", []string{"domain: d\nlimits: []\n"},
			false, "f0.yaml: config error, unknown key 'limits'"},
		{"misspelled rate_limit", []string{yml(`
			|domain: d
			|descriptors:
			|  - key: k
			|    ratelimit: {unit: second, requests_per_unit: 1}`)},
			false, "f0.yaml: config error, unknown key 'ratelimit'"},
		{"misspelled key inside rate_limit", []string{yml(`
			|domain: d
			|descriptors:
			|  - key: k
			|    rate_limit: {unit: second, requestsperunit: 1}`)},
			false, "f0.yaml: config error, unknown key 'requestsperunit'"},
		{"unknown key inside replaces", []string{yml(`
			|domain: d
			|descriptors:
			|  - key: k
			|    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{nam: x}]}`)},
			false, "f0.yaml: config error, unknown key 'nam'"},
		{"list of scalars", []string{"domain: d\ndescriptors: [x, y]\n"},
			false, "f0.yaml: config error, yaml file contains list of type other than map: x"},
		{"float leaf", []string{yml(`
			|domain: d
			|descriptors:
			|  - key: k
			|    rate_limit: {unit: second, requests_per_unit: 2.5}`)},
			false, "f0.yaml: error checking config"},
		{"rate_limit is a scalar", []string{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: often\n"},
			false, "f0.yaml: error loading config file: yaml: unmarshal errors:\n  line 4: cannot unmarshal !!str `often` into config.YamlRateLimit"},
		{"descriptors is a scalar", []string{"domain: d\ndescriptors: none\n"},
			false, "f0.yaml: error loading config file: yaml: unmarshal errors:\n  line 2: cannot unmarshal !!str `none` into []config.YamlDescriptor"},
		{"negative requests", []string{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: -3}\n"},
			false, "f0.yaml: error loading config file: yaml: unmarshal errors:\n  line 4: cannot unmarshal !!int `-3` into uint32"},
		{"empty domain", []string{"descriptors:\n  - key: k\n"},
			false, "f0.yaml: config file cannot have empty domain"},
		{"empty file", []string{""},
			false, "f0.yaml: config file cannot have empty domain"},
		{"duplicate domain", []string{okFile, okFile},
			false, "f1.yaml: duplicate domain 'shop' in config file"},
		{"duplicate key across merged files", []string{okFile, okFile},
			true, "f1.yaml: duplicate descriptor composite key 'shop.client'"},
		{"empty key", []string{"domain: d\ndescriptors:\n  - value: v\n"},
			false, "f0.yaml: descriptor has empty key"},
		{"duplicate key", []string{yml(`
			|domain: d
			|descriptors:
			|  - key: a
			|    value: b
			|  - key: a
			|    value: b`)},
			false, "f0.yaml: duplicate descriptor composite key 'd.a_b'"},
		{"duplicate nested key", []string{yml(`
			|domain: d
			|descriptors:
			|  - key: a
			|    descriptors:
			|      - key: b
			|      - key: b`)},
			false, "f0.yaml: duplicate descriptor composite key 'd.a.b'"},
		{"bad unit", []string{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"},
			false, "f0.yaml: invalid rate limit unit 'fortnight'"},
		{"unknown unit", []string{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: unknown, requests_per_unit: 1}\n"},
			false, "f0.yaml: invalid rate limit unit 'unknown'"},
		{"missing unit", []string{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {requests_per_unit: 1}\n"},
			false, "f0.yaml: invalid rate limit unit ''"},
		{"unlimited with a unit", []string{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: hour}\n"},
			false, "f0.yaml: should not specify rate limit unit when unlimited"},
		{"empty replaces", []string{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1, replaces: [{name: ''}]}\n"},
			false, "f0.yaml: should not have an empty replaces entry"},
		{"replaces itself", []string{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1, name: me, replaces: [{name: me}]}\n"},
			false, "f0.yaml: replaces should not contain name of same descriptor"},
		{"share_threshold without wildcard", []string{"domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n"},
			false, "f0.yaml: share_threshold can only be used with wildcard values (ending with '*'), but found key 'k_v'"},
		{"share_threshold without value", []string{"domain: d\ndescriptors:\n  - key: k\n    share_threshold: true\n"},
			false, "f0.yaml: share_threshold can only be used with wildcard values (ending with '*'), but found key 'k'"},
		{"errors are found in file order, depth first", []string{yml(`
			|domain: d
			|descriptors:
			|  - key: a
			|    descriptors:
			|      - key: b
			|        rate_limit: {unit: often}
			|  - key: ""`)},
			false, "f0.yaml: invalid rate limit unit 'often'"},
		// bucketgrid's additions
		{"bad algorithm", []string{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1, algorithm: leaky}\n"},
			false, "f0.yaml: invalid rate limit algorithm 'leaky' (want fixed_window or token_bucket)"},
		{"burst on a fixed window", []string{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1, burst: 5}\n"},
			false, "f0.yaml: burst is only valid with algorithm token_bucket"},
		{"faster than a bucket refills", []string{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1000000000}\n"},
			false, "f0.yaml: requests_per_unit 1000000000 per second is above the 999999999 per second bucketgrid can refill"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := make([]File, len(tc.files))
			for i, d := range tc.files {
				files[i] = File{Name: "f" + string(rune('0'+i)) + ".yaml", Data: []byte(d)}
			}
			c, err := Load(files, Options{MergeDomains: tc.merge})
			if err == nil {
				t.Fatalf("loaded %d domains, want error %q", c.Domains(), tc.want)
			}
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("error %T is not an *Error", err)
			}
			if err.Error() != tc.want {
				t.Fatalf("error\n got %q\nwant %q", err, tc.want)
			}
		})
	}
}

func TestLoadAccepts(t *testing.T) {
	for _, tc := range []struct {
		name string
		doc  string
		opts Options
	}{
		{"unit in any case", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: MiNuTe, requests_per_unit: 1}\n", Options{}},
		{"every unit", yml(`
			|domain: d
			|descriptors:
			|  - {key: s, rate_limit: {unit: second, requests_per_unit: 1}}
			|  - {key: m, rate_limit: {unit: minute, requests_per_unit: 1}}
			|  - {key: h, rate_limit: {unit: hour, requests_per_unit: 1}}
			|  - {key: d, rate_limit: {unit: day, requests_per_unit: 1}}
			|  - {key: w, rate_limit: {unit: week, requests_per_unit: 1}}
			|  - {key: mo, rate_limit: {unit: month, requests_per_unit: 1}}
			|  - {key: y, rate_limit: {unit: year, requests_per_unit: 1}}`), Options{}},
		{"unlimited with requests", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, requests_per_unit: 5}\n", Options{}},
		{"zero requests", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 0}\n", Options{}},
		{"the largest per-second limit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 999999999}\n", Options{}},
		{"the largest limit per minute", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 4294967295}\n", Options{}},
		{"burst with the default algorithm token_bucket", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5, burst: 50}\n", Options{Algorithm: TokenBucket}},
		{"node without limit", "domain: d\ndescriptors:\n  - key: k\n", Options{}},
		{"null values", "domain: d\ndescriptors:\n  - key: k\n    value:\n    rate_limit:\n", Options{}},
		{"quota and metric flags", yml(`
			|domain: d
			|descriptors:
			|  - key: k
			|    quota_mode: true
			|    detailed_metric: true
			|    value_to_metric: true
			|    shadow_mode: false
			|    rate_limit: {unit: second, requests_per_unit: 5}`), Options{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if c := load(t, tc.opts, tc.doc); c.Domains() != 1 {
				t.Fatalf("%d domains", c.Domains())
			}
		})
	}
}

func TestLoadLimits(t *testing.T) {
	c := load(t, Options{Algorithm: TokenBucket}, yml(`
		|domain: d
		|descriptors:
		|  - key: fw
		|    rate_limit: {unit: hour, requests_per_unit: 7, algorithm: fixed_window, name: a, replaces: [{name: b}, {name: c}]}
		|  - key: tb
		|    rate_limit: {unit: minute, requests_per_unit: 3, burst: 9}
		|  - key: un
		|    rate_limit: {unlimited: true}`))
	for _, tc := range []struct {
		key  string
		want Limit
	}{
		{"fw", Limit{RequestsPerUnit: 7, Unit: 3 /* HOUR */, Name: "a", Algorithm: FixedWindow}},
		{"tb", Limit{RequestsPerUnit: 3, Unit: 2 /* MINUTE */, Algorithm: TokenBucket, Burst: 9}},
		{"un", Limit{Unlimited: true, Algorithm: TokenBucket}},
	} {
		r, ok := c.Match("d", []Entry{{Key: tc.key, Value: "x"}}, nil)
		if !ok {
			t.Fatalf("%s: no match", tc.key)
		}
		if r.Name != tc.want.Name || r.RequestsPerUnit != tc.want.RequestsPerUnit || r.Unit != tc.want.Unit ||
			r.Unlimited != tc.want.Unlimited || r.Algorithm != tc.want.Algorithm || r.Burst != tc.want.Burst {
			t.Fatalf("%s: %+v, want %+v", tc.key, r.Limit, tc.want)
		}
	}
	// what replaces does is policy's TestPlanReplacesAndUnlimited; the plan's
	// bucket holds the burst
	p, err := c.Plan(&Request{Domain: "d", Descriptors: []Descriptor{{Entries: []Entry{{Key: "tb", Value: "x"}}}}}, nil)
	if err != nil || len(p.Batches) != 1 || p.Batches[0].Config.Bandwidths[0].Capacity != 9 {
		t.Fatalf("token bucket of burst 9: %+v, %v", p.Batches, err)
	}
}

func TestMergeDomains(t *testing.T) {
	c := load(t, Options{MergeDomains: true},
		"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
		"domain: d\ndescriptors:\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 2}\n  - key: w\n    value: x*\n    rate_limit: {unit: second, requests_per_unit: 3}\n",
		"domain: e\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 4}\n")
	for _, tc := range []struct {
		domain, key, value string
		want               uint32
	}{{"d", "a", "", 1}, {"d", "b", "", 2}, {"d", "w", "xy", 3}, {"e", "a", "", 4}} {
		r, ok := c.Match(tc.domain, []Entry{{Key: tc.key, Value: tc.value}}, nil)
		if !ok || r.RequestsPerUnit != tc.want {
			t.Fatalf("%s.%s: %v %d, want %d", tc.domain, tc.key, ok, r.RequestsPerUnit, tc.want)
		}
	}
	if c.Domains() != 2 {
		t.Fatalf("%d domains, want 2", c.Domains())
	}
}
