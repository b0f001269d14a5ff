package wasmfilter

import (
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/wasmfilter/internal/envoystats"
)

func TestMetricNames(t *testing.T) {
	env := newFakeEnvoy()
	env.vm(t, perAddress(`{"unit": "second", "requests_per_unit": 1}`, `, "stat_prefix": "edge"`))
	var want []string
	for _, e := range metricEvents {
		want = append(want, "edge.policy.rules."+e)
	}
	sort.Strings(want)
	if got := env.stats.Names(); !slices.Equal(got, want) {
		t.Fatalf("metrics %v, want %v", got, want)
	}
}

// TestMetricsCountEveryOutcome drives each outcome through two VMs sharing
// one Envoy's stats and reads the counters as /stats shows them.
func TestMetricsCountEveryOutcome(t *testing.T) {
	env := newFakeEnvoy()
	cfg := keyedConfig("k", `{"unit": "hour", "requests_per_unit": 1, "algorithm": "token_bucket", "burst": 2}`,
		`, "max_attempts": 3, "slots": 2`)
	a, b := env.vm(t, cfg), env.vm(t, cfg)
	k := func(v string) map[string]string { return map[string]string{"k": v} }
	a.do("", k("x"))
	b.do("", k("x"))
	a.do("", k("x")) // over the limit
	want := map[string]uint64{"ok": 2, "over_limit": 1}
	// Two more clients in a 2-slot table: one eviction.
	b.do("", k("y"))
	a.do("", k("z"))
	want["ok"] += 2
	want["evicted"] = 1
	// A shared-data failure, let through by failure_mode open.
	env.shared.Fail = func(op, key string) uint32 { return uint32(StatusInternalFailure) }
	a.do("", k("x"))
	env.shared.Fail = nil
	want["error"], want["failure_mode_allowed"] = 1, 1
	want["ok"]++ // it went upstream
	// Contention: another VM writes between each read and write of a.
	var inside bool
	env.shared.BeforeSet = func(string) {
		if !inside {
			inside = true
			env.clock.Add(int64(time.Hour)) // a token for b
			b.do("", k("z"))
			inside = false
		}
	}
	if r := a.do("", k("z")); r.status != 429 || r.details != "bucketgrid_contention" {
		t.Fatalf("contended request: %d %s", r.status, r.details)
	}
	env.shared.BeforeSet = nil
	want["ok"] += 3
	want["cas_conflict"] = 3
	want["cas_gave_up"] = 1
	for _, e := range metricEvents {
		if got := env.metric(t, "rules", e); got != want[e] {
			t.Errorf("%s = %d, want %d", e, got, want[e])
		}
	}
}

func TestMetricsTableFull(t *testing.T) {
	for _, mode := range []string{"reject", "allow"} {
		env := newFakeEnvoy()
		vm := env.vm(t, perClient(1, mode))
		vm.do(clientAddr(0), nil)
		r := vm.do(clientAddr(1), nil)
		if (mode == "reject") != (r.status == 429) {
			t.Fatalf("%s: %d", mode, r.status)
		}
		allowed := uint64(0)
		if mode == "allow" {
			allowed = 1
		}
		if env.metric(t, "rules", "table_full") != 1 || env.metric(t, "rules", "table_full_allowed") != allowed {
			t.Fatalf("%s: table_full %d, allowed %d", mode, env.metric(t, "rules", "table_full"),
				env.metric(t, "rules", "table_full_allowed"))
		}
	}
}

// The fake stats copy Envoy's rules; the filter must live with them.
func TestStatsFollowEnvoy(t *testing.T) {
	s := envoystats.New()
	vm1, vm2 := s.VM(), s.VM()
	c1, _ := vm1.Define(envoystats.Counter, "x")
	c2, _ := vm2.Define(envoystats.Counter, "x")
	g, _ := vm1.Define(envoystats.Gauge, "g")
	h, _ := vm1.Define(envoystats.Histogram, "h")
	if c1&3 != 0 || g&3 != 1 || h&3 != 2 {
		t.Fatalf("ids %d %d %d: the low bits are the type", c1, g, h)
	}
	vm1.Increment(c1, 2)
	vm2.Increment(c2, 3)
	if v, _ := s.Value("x"); v != 5 {
		t.Fatalf("two VMs' counter %d, want one stat of 5", v)
	}
	for _, c := range []struct {
		st, want uint32
	}{
		{vm1.Increment(c1, 0), envoystats.BadArgument},
		{vm1.Increment(c1, -1), envoystats.BadArgument},
		{vm1.Increment(h, 1), envoystats.BadArgument},
		{vm1.Increment(999, 1), envoystats.NotFound},
		{vm1.Increment(g, -1), envoystats.OK},
		{vm1.Record(g, 7), envoystats.OK},
	} {
		if c.st != c.want {
			t.Errorf("status %d, want %d", c.st, c.want)
		}
	}
	if v, st := vm1.Get(g); v != 7 || st != envoystats.OK {
		t.Fatalf("gauge %d %d", v, st)
	}
	if _, st := vm1.Get(h); st != envoystats.BadArgument {
		t.Fatal("reading a histogram")
	}
	if _, st := vm1.Define(3, "bad"); st != envoystats.BadArgument {
		t.Fatal("unknown metric type accepted")
	}
	if names := s.Names(); strings.Join(names, ",") != "g,h,x" {
		t.Fatalf("names %v: the wasmcustom. namespace is stripped", names)
	}
}

// TestStatsTagRegex checks the stats_tags entry of examples/envoy/envoy.yaml
// against the names the filter defines, with Envoy's tag-extraction rule:
// the first capture group is cut from the name, the second is the tag's
// value. RE2 (Go's regexp) is the syntax Envoy uses.
func TestStatsTagRegex(t *testing.T) {
	raw, err := os.ReadFile("../examples/envoy/envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`regex: '([^']+)'`).FindSubmatch(raw)
	if m == nil {
		t.Fatal("no stats_tags regex in envoy.yaml")
	}
	re := regexp.MustCompile(string(m[1]))
	for _, table := range []string{tableName} {
		ms := newMetrics("bucketgrid", table)
		for i, name := range ms.names {
			full := envoystats.Namespace + name
			sub := re.FindStringSubmatchIndex(full)
			if len(sub) < 6 { // nil: no match
				t.Fatalf("%s does not match %s", full, re)
			}
			value := full[sub[4]:sub[5]]
			extracted := full[:sub[2]] + full[sub[3]:]
			if value != table || extracted != "wasmcustom.bucketgrid.policy."+metricEvents[i] {
				t.Fatalf("%s: tag %q, name %q", full, value, extracted)
			}
		}
	}
}
