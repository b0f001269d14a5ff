package policy_test

import (
	"strings"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/core/wire"
	. "github.com/bucketgrid/bucketgrid/policy"
)

// mapStore executes a plan's batches against buckets held in a map, as an
// executor does: each batch atomically, the bucket created when absent.
type mapStore map[string][]byte

func (m mapStore) run(t *testing.T, p *Plan, now time.Time) []Outcome {
	t.Helper()
	out := make([]Outcome, len(p.Batches))
	for i := range p.Batches {
		b := &p.Batches[i]
		next, changed, resp := wire.Process(m[b.Key], wire.Request{Mode: wire.ModeCreateIfAbsent, Config: &b.Config,
			Ops: b.Ops}, now.UnixNano())
		if err := resp.Err(); err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
		if changed {
			m[b.Key] = next
		}
		out[i].Results = resp.Results
	}
	return out
}

// call is one request through the one call shape: plan, execute, decide.
func (m mapStore) call(t *testing.T, c *Rules, s *Settings, now time.Time, ds ...Descriptor) *Decision {
	t.Helper()
	p, err := c.Plan(&Request{Domain: "d", Descriptors: ds}, s)
	if err != nil {
		t.Fatalf("Plan: %v", err)
	}
	d, err := p.Decide(m.run(t, &p, now), now)
	if err != nil {
		t.Fatalf("Decide: %v", err)
	}
	return &d
}

const oneAMinute = `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: other
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: free
    rate_limit: {unlimited: true}
`

var t0 = time.Date(2026, 12, 1, 12, 0, 30, 0, time.UTC)

// A door's global quota mode turns an over-limit descriptor into OK with
// its status kept and marks the rule as quota mode, so the service answers
// it as envoyproxy/ratelimit answers a quota_mode rule; the service did the
// rewrite itself before.
func TestDecideQuotaModeSetting(t *testing.T) {
	c := load(t, Options{}, oneAMinute)
	m := mapStore{}
	s := &Settings{QuotaMode: true}
	m.call(t, c, s, t0, desc("k", "a"))
	d := m.call(t, c, s, t0, desc("k", "a"))
	st := d.Statuses[0]
	if d.Code != OK || st.Code != OK || !st.Over || st.Rule == nil || !st.Rule.QuotaMode {
		t.Fatalf("quota mode: code %v, status %+v", d.Code, st)
	}
	d = m.call(t, c, nil, t0, desc("k", "a"))
	if d.Code != OverLimit || d.Statuses[0].Rule.QuotaMode {
		t.Fatalf("without quota mode: code %v, status %+v", d.Code, d.Statuses[0])
	}
}

// The door's shadow mode answers OK and says it did.
func TestDecideShadowModeSetting(t *testing.T) {
	c := load(t, Options{}, oneAMinute)
	m := mapStore{}
	s := &Settings{ShadowMode: true}
	m.call(t, c, s, t0, desc("k", "a"))
	d := m.call(t, c, s, t0, desc("k", "a"))
	if d.Code != OK || !d.Shadowed || d.Statuses[0].Code != OverLimit {
		t.Fatalf("shadow mode: %+v", d)
	}
}

// A store of short keys gets keys that fit it, distinct for distinct
// descriptors, and the ones it fits with core.FitKey (the filter's slots
// held these keys before the plan fitted them).
func TestPlanFitsKeys(t *testing.T) {
	c := load(t, Options{}, oneAMinute)
	long := strings.Repeat("v", 150)
	seen := map[string]bool{}
	for _, v := range []string{long + "1", long + "2", "short"} {
		p, err := c.Plan(&Request{Domain: "d", Descriptors: []Descriptor{desc("k", v)}}, &Settings{MaxKeyBytes: 128})
		if err != nil {
			t.Fatal(err)
		}
		whole := Key("d", []Entry{{"k", v}}, &Rule{})
		want, _ := core.FitKey(whole, 128)
		if got := p.Batches[0].Key; len(got) > 128 || got != want || seen[got] {
			t.Fatalf("key of %d bytes: %q, want %q, unseen", len(v), got, want)
		}
		seen[p.Batches[0].Key] = true
	}
}

// Retry-After is the door's choice; the other fields follow Headers.
func TestDecideRetryAfterHeader(t *testing.T) {
	c := load(t, Options{}, oneAMinute)
	for _, which := range []Headers{XRateLimitHeaders, XRateLimitHeaders | RetryAfterHeader} {
		m := mapStore{}
		m.call(t, c, &Settings{Headers: which}, t0, desc("k", "a"))
		d := m.call(t, c, &Settings{Headers: which}, t0, desc("k", "a"))
		retry := ""
		for _, h := range d.Headers {
			if h.Name == "retry-after" {
				retry = h.Value
			}
		}
		if want := map[bool]string{true: "30", false: ""}[which&RetryAfterHeader != 0]; retry != want || len(d.Headers) < 3 {
			t.Fatalf("headers %b: %v, want retry-after %q", which, d.Headers, want)
		}
	}
}

// A batch the door could not run lets the request through without its
// descriptor; the others are decided as usual.
func TestDecideSkipped(t *testing.T) {
	c := load(t, Options{}, oneAMinute)
	m := mapStore{}
	m.call(t, c, nil, t0, desc("k", "a"))
	p, err := c.Plan(&Request{Domain: "d", Descriptors: []Descriptor{desc("k", "a"), desc("other", "x")}},
		&Settings{Headers: XRateLimitHeaders})
	if err != nil {
		t.Fatal(err)
	}
	out := m.run(t, &p, t0)
	out[0] = Outcome{Skipped: true}
	d, err := p.Decide(out, t0)
	if err != nil {
		t.Fatal(err)
	}
	if d.Code != OK || d.Statuses[0].Rule != nil || d.Statuses[1].Remaining != 99 || len(d.Headers) != 3 ||
		d.Headers[0].Value != "100" {
		t.Fatalf("skipped: %+v", d)
	}
	if _, err := p.Decide(out[:1], t0); err == nil {
		t.Fatal("Decide took one outcome for two batches")
	}
}

// A result decided from one of n instances' shares describes the share.
func TestDecideShares(t *testing.T) {
	c := load(t, Options{}, oneAMinute)
	p, err := c.Plan(&Request{Domain: "d", Descriptors: []Descriptor{desc("other", "x")}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := &p.Batches[0]
	share := b.Config
	share.Bandwidths = []core.Bandwidth{b.Config.Bandwidths[0]}
	share = share.Share(4)
	_, _, resp := wire.Process(nil, wire.Request{Mode: wire.ModeCreateIfAbsent, Config: &share, Ops: b.Ops}, t0.UnixNano())
	d, err := p.Decide([]Outcome{{Results: resp.Results, Shares: 4}}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if st := d.Statuses[0]; st.Rule.RequestsPerUnit != 25 || st.Remaining != 24 {
		t.Fatalf("share of 4: limit %d, remaining %d; want 25, 24", st.Rule.RequestsPerUnit, st.Remaining)
	}
}

// With a probe, only the descriptor going over is charged; the others
// count their hits as within the limit and leave their buckets as they were.
func TestHoldBack(t *testing.T) {
	c := load(t, Options{}, oneAMinute)
	m := mapStore{}
	m.call(t, c, nil, t0, desc("k", "a")) // k is now at its limit
	ds := []Descriptor{desc("k", "a"), desc("other", "x"), desc("free", "y")}
	p, err := c.Plan(&Request{Domain: "d", Descriptors: ds}, nil)
	if err != nil {
		t.Fatal(err)
	}
	probe := p.Probe()
	if probe == nil {
		t.Fatal("no probe for two limited descriptors")
	}
	pd, err := probe.Decide(m.run(t, probe, t0), t0)
	if err != nil {
		t.Fatal(err)
	}
	if !p.HoldBack(&pd) {
		t.Fatal("nothing held back, with k over its limit")
	}
	d, err := p.Decide(m.run(t, &p, t0), t0)
	if err != nil {
		t.Fatal(err)
	}
	if st := d.Statuses[1]; d.Code != OverLimit || hits(&st) != 1 || within(&st) != 1 || st.Remaining != 100 {
		t.Fatalf("held back: code %v, status %+v", d.Code, st)
	}
	if d := m.call(t, c, nil, t0, desc("other", "x")); d.Statuses[0].Remaining != 99 {
		t.Fatalf("other charged while held back: remaining %d after one hit", d.Statuses[0].Remaining)
	}
	one, _ := c.Plan(&Request{Domain: "d", Descriptors: ds[:1]}, nil)
	if one.Probe() != nil {
		t.Fatal("a probe for a lone limited descriptor")
	}
}

func hits(st *Status) uint64 { h, _, _, _, _ := st.Counts(); return h }

func within(st *Status) uint64 { _, w, _, _, _ := st.Counts(); return w }
