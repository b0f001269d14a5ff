package quota

import (
	"testing"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

const tenantRules = `
domain: fleet
descriptors:
  - key: tenant
    value: shared
    rate_limit: {unit: second, requests_per_unit: 100, algorithm: token_bucket}
`

var tenant = map[string]string{"tenant": "shared"}

// load is one simulated Envoy's traffic: uniform requests at rate per
// second from start (since the fleet started) until stop (0: never).
type load struct {
	e           *envoy
	rate        float64
	start, stop time.Duration
	next        time.Duration
	admitted    []int64 // per step
}

const simStep = 10 * time.Millisecond

// simulate runs the fleet for d in steps of simStep, each load deciding
// its requests due, and returns the fleet's admissions per step.
func simulate(f *fleet, loads []*load, d time.Duration) []int64 {
	steps := int(d / simStep)
	fleet := make([]int64, steps)
	for _, l := range loads {
		l.admitted = make([]int64, steps)
		if l.next < l.start {
			l.next = l.start
		}
	}
	for i := range steps {
		f.clk.Advance(simStep)
		now := f.elapsed()
		for _, l := range loads {
			for l.next <= now && (l.stop == 0 || l.next < l.stop) {
				if l.e.decide(tenant) {
					l.admitted[i]++
					fleet[i]++
				}
				l.next += time.Duration(float64(time.Second) / l.rate)
			}
		}
		f.settle() // new buckets' immediate reports
		f.step(0)
	}
	return fleet
}

// worst returns the largest sum of w/simStep consecutive entries from
// index from on, and the smallest.
func worst(per []int64, from int, w time.Duration) (hi, lo int64) {
	n := int(w / simStep)
	var sum int64
	lo = 1 << 62
	for i := from; i < len(per); i++ {
		sum += per[i]
		if i-from >= n {
			sum -= per[i-n]
		}
		if i-from >= n-1 {
			hi, lo = max(hi, sum), min(lo, sum)
		}
	}
	return hi, lo
}

func sum(per []int64) (n int64) {
	for _, v := range per {
		n += v
	}
	return n
}

// fleetBound is the package doc's bound on what the fleet admits in any
// span w: B + R·(w + Period + Delivery) + 2·R·Period + M, M the Envoys'
// max_tokens, at most n + R·Burst.
func fleetBound(b, r float64, n int, w time.Duration, o Options) float64 {
	return b + r*(w+3*o.Period+o.Delivery).Seconds() + float64(n) + r*o.Burst.Seconds()
}

// TestFleetWithinLimit: ten Envoys asking 6.5 times a 100/s limit, in
// unequal parts, decide locally from their assignments; the fleet admits
// what the grid bucket allows, within the bound in every minute and
// close to the limit, and each Envoy's share follows its demand.
func TestFleetWithinLimit(t *testing.T) {
	f := newFleet(t, tenantRules, Options{})
	deny := &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_DENY_ALL}}
	var loads []*load
	for i := range 10 {
		e := f.envoy("fleet")
		e.noAssign = deny // nothing admitted before an assignment: the bound is exact
		loads = append(loads, &load{e: e, rate: float64(20 + 10*i), start: time.Duration(i) * 37 * time.Millisecond})
	}
	const d = 180 * time.Second
	per := simulate(f, loads, d)
	o := f.srv.opts
	const limit = 100.0

	// every span from the start: never more than the grid bucket allows
	var run int64
	for i, v := range per {
		run += v
		if bound := 100 + limit*float64(i+1)*simStep.Seconds(); float64(run) > bound {
			t.Fatalf("%d admitted by %v, above the grid bucket's %v", run, time.Duration(i+1)*simStep, bound)
		}
	}
	const w = 60 * time.Second
	hi, _ := worst(per, 0, w)
	if bound := fleetBound(100, limit, 10, w, o); float64(hi) > bound {
		t.Fatalf("worst minute admitted %d, above the bound %v", hi, bound)
	}
	// after two periods of warm-up the fleet runs at the limit
	_, lo := worst(per, int(2*o.Period/simStep), w)
	const eps = 0.05
	if got := float64(hi) / (limit * w.Seconds()); got > 1+eps {
		t.Errorf("worst minute at %.3f of the limit, above 1+ε = %.2f", got, 1+eps)
	}
	if got := float64(lo) / (limit * w.Seconds()); got < 1-eps {
		t.Errorf("slowest minute after warm-up at %.3f of the limit, below 1-ε = %.2f", got, 1-eps)
	}
	t.Logf("worst minute %d, slowest %d (limit %v per minute); total %d in %v", hi, lo, limit*w.Seconds(), sum(per), d)

	// shares follow demand: over the last two minutes each Envoy's
	// admissions are within 25% of its demand's part of the limit
	var demand float64
	for _, l := range loads {
		demand += l.rate
	}
	from := int(60 * time.Second / simStep)
	for i, l := range loads {
		got := float64(sum(l.admitted[from:])) / (d - 60*time.Second).Seconds()
		want := limit * l.rate / demand
		if got < 0.75*want || got > 1.25*want {
			t.Errorf("envoy %d (demand %v/s) admitted %.1f/s, want about %.1f/s (its demand's part)", i, l.rate, got, want)
		}
	}
}

// TestNewEnvoyGetsItsShare: nine Envoys hold a saturated bucket; a tenth
// that starts sending gets a token bucket within one report interval, and
// its share of the limit within one more, while the fleet stays within
// the bound.
func TestNewEnvoyGetsItsShare(t *testing.T) {
	f := newFleet(t, tenantRules, Options{})
	var loads []*load
	for range 9 {
		loads = append(loads, &load{e: f.envoy("fleet"), rate: 50})
	}
	late := &load{e: f.envoy("fleet"), rate: 50, start: 42*time.Second + 300*time.Millisecond}
	loads = append(loads, late)
	per := simulate(f, loads, 42*time.Second+300*time.Millisecond) // up to its first request
	per = append(per, simulate(f, loads, envoyReportInterval)...)
	s, known := late.e.assignment(tenant)
	if !known || s.GetTokenBucket() == nil {
		t.Fatalf("one report interval after its first request the new Envoy holds %v, want a token bucket", s)
	}
	per = append(per, simulate(f, loads, 2*envoyReportInterval)...)
	// its last period: its part of the limit (a tenth, 10/s), give or take
	// the hysteresis and rounding
	n := len(late.admitted)
	got := float64(sum(late.admitted[n-int(envoyReportInterval/simStep):])) / envoyReportInterval.Seconds()
	if got < 8 || got > 12 {
		t.Fatalf("the new Envoy admits %.1f/s two intervals after joining, want its tenth of 100/s", got)
	}
	if hi, _ := worst(per, 0, 30*time.Second); float64(hi) > fleetBound(100, 100, 10, 30*time.Second, f.srv.opts) {
		t.Fatalf("worst 30 s admitted %d, above the bound", hi)
	}
}

// TestBlanketRules: the RLS's unlimited, zero and unmatched rules answer
// ALLOW_ALL, DENY_ALL and ALLOW_ALL, renewed each period, and the Envoy
// decides by them.
func TestBlanketRules(t *testing.T) {
	f := newFleet(t, `
domain: b
descriptors:
  - key: free
    rate_limit: {unlimited: true}
  - key: blocked
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: shadow
    rate_limit: {unit: second, requests_per_unit: 1}
    shadow_mode: true
`, Options{})
	e := f.envoy("b")
	cases := []struct {
		id    map[string]string
		allow bool
	}{
		{map[string]string{"free": "x"}, true},
		{map[string]string{"blocked": "x"}, false},
		{map[string]string{"shadow": "x"}, true},
		{map[string]string{"unknown": "x"}, true},
		{map[string]string{"free": string(make([]byte, 5000))}, false}, // beyond the rules' bounds
	}
	for _, c := range cases {
		e.decide(c.id)
	}
	f.settle()
	for range 3 {
		f.step(envoyReportInterval)
	}
	for _, c := range cases {
		s, known := e.assignment(c.id)
		want := typev3.RateLimitStrategy_DENY_ALL
		if c.allow {
			want = typev3.RateLimitStrategy_ALLOW_ALL
		}
		if !known || s.GetStrategy() == nil || s.GetBlanketRule() != want {
			t.Errorf("bucket %.20v: assignment %v, want %v", c.id, s, want)
		}
		if got := e.decide(c.id); got != c.allow {
			t.Errorf("bucket %.20v: decided %v, want %v", c.id, got, c.allow)
		}
	}
}

const fleet50Rules = `
domain: fleet
descriptors:
  - key: tenant
    value: shared
    rate_limit: {unit: second, requests_per_unit: 500, algorithm: token_bucket}
`

// TestFleet50: fifty Envoys asking 6.9 times a 500/s limit, in unequal
// parts, decide locally: every second from the third period on admits at
// least 95% of the limit, over every minute the fleet admits within
// ε = 5% of the limit after the first two periods, never above the
// package doc's bound (nor above the grid bucket's B + R·t from the
// start), and a 51st Envoy that starts late holds a token bucket of its
// part of the limit within one report interval of its first request, and
// admits its part in the interval after.
func TestFleet50(t *testing.T) {
	f := newFleet(t, fleet50Rules, Options{})
	deny := &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_DENY_ALL}}
	var loads []*load
	var demand float64
	for i := range 50 {
		e := f.envoy("fleet")
		e.noAssign = deny // nothing admitted before an assignment: the bound is exact
		l := &load{e: e, rate: float64(20 + 2*i), start: time.Duration(i) * 97 * time.Millisecond}
		loads = append(loads, l)
		demand += l.rate
	}
	const (
		limit = 500.0
		join  = 120*time.Second + 2300*time.Millisecond
		d     = 180 * time.Second
	)
	late := &load{e: f.envoy("fleet"), rate: 60, start: join}
	late.e.noAssign = deny
	loads = append(loads, late)
	demand += late.rate
	per := simulate(f, loads, join+envoyReportInterval)
	// the warm-up: from what second on every second admits at least
	// 1-ε of the limit, until the 51st Envoy joins
	sec := int(time.Second / simStep)
	warm := 0
	for i := 0; (i+1)*sec <= int(join/simStep); i++ {
		if float64(sum(per[i*sec:(i+1)*sec])) < 0.95*limit {
			warm = i + 1
		}
	}
	if warm > 15 {
		t.Errorf("the fleet reaches 95%% of the limit every second from %d s on, want within three periods (15 s)", warm)
	}
	s, known := late.e.assignment(tenant)
	share := limit * late.rate / demand // its demand's part, per second
	perPeriod := share * envoyReportInterval.Seconds()
	if !known || s.GetTokenBucket() == nil || float64(s.GetTokenBucket().GetTokensPerFill().GetValue()) < 0.75*perPeriod {
		t.Fatalf("one report interval after its first request the new Envoy holds %v, want a token bucket of about %.0f tokens per 5 s", s, perPeriod)
	}
	per = append(per, simulate(f, loads, envoyReportInterval)...) // simulate counts each load's admissions anew
	lateGot := float64(sum(late.admitted)) / envoyReportInterval.Seconds()
	if lateGot < 0.75*share || lateGot > 1.5*share {
		t.Errorf("the new Envoy admitted %.1f/s in the interval after, want about its part %.1f/s", lateGot, share)
	}
	per = append(per, simulate(f, loads, d-join-2*envoyReportInterval)...)

	var run int64
	for i, v := range per {
		run += v
		if bound := limit + limit*float64(i+1)*simStep.Seconds(); float64(run) > bound {
			t.Fatalf("%d admitted by %v, above the grid bucket's %v", run, time.Duration(i+1)*simStep, bound)
		}
	}
	const w, eps = 60 * time.Second, 0.05
	o := f.srv.opts
	hi, _ := worst(per, 0, w)
	if bound := fleetBound(limit, limit, 51, w, o); float64(hi) > bound {
		t.Fatalf("worst minute admitted %d, above the bound %v", hi, bound)
	}
	_, lo := worst(per, int(2*o.Period/simStep), w)
	if got := float64(hi) / (limit * w.Seconds()); got > 1+eps {
		t.Errorf("worst minute at %.3f of the limit, above 1+ε = %.2f", got, 1+eps)
	}
	if got := float64(lo) / (limit * w.Seconds()); got < 1-eps {
		t.Errorf("slowest minute after warm-up at %.3f of the limit, below 1-ε = %.2f", got, 1-eps)
	}
	t.Logf("worst minute %d, slowest %d (limit %v per minute); total %d in %v; 95%% of the limit every second from %d s on; the new Envoy admitted %.1f/s, its part %.1f/s",
		hi, lo, limit*w.Seconds(), sum(per), d, warm, lateGot, share)
}
