package httplimit

import (
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/policy"
)

func TestPolicyField(t *testing.T) {
	tests := []struct {
		name string
		bws  []core.Bandwidth
		want string
	}{
		{"classic", []core.Bandwidth{core.Intervally(100, 100, time.Minute).WithID("burst")}, `"burst";q=100;w=60`},
		{"greedy burst above rate", []core.Bandwidth{core.Greedy(100, 10, time.Second)}, `"default";q=100;w=10`},
		{"intervally in steps", []core.Bandwidth{core.Intervally(25, 10, time.Minute)}, `"default";q=25;w=180`},
		{"sub-second window is at least 1", []core.Bandwidth{core.Greedy(5, 5, 10*time.Millisecond)}, `"default";q=5;w=1`},
		{"rounded up", []core.Bandwidth{core.Greedy(1, 3, 2*time.Second)}, `"default";q=1;w=1`},
		{"rounded up past a second", []core.Bandwidth{core.Greedy(4, 3, 2*time.Second)}, `"default";q=4;w=3`},
		{"escapes and non-ASCII", []core.Bandwidth{core.Greedy(1, 1, time.Second).WithID("a\"b\\c\tdé")}, `"a\"b\\c?d??";q=1;w=1`},
		{"huge values are capped", []core.Bandwidth{core.Greedy(math.MaxInt64, 1, time.Duration(math.MaxInt64))},
			`"default";q=999999999999999;w=999999999999999`},
		{"indexes", []core.Bandwidth{core.Greedy(1, 1, time.Second), core.Greedy(2, 1, time.Second).WithID("x"), core.Greedy(3, 1, time.Second)},
			`"0";q=1;w=1, "x";q=2;w=2, "2";q=3;w=3`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := policyField(core.Config{Bandwidths: tt.bws}); got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
}

func TestRateLimitField(t *testing.T) {
	one := core.Config{Bandwidths: []core.Bandwidth{core.Greedy(10, 1, time.Second).WithID("s")}}
	two := core.Config{Bandwidths: []core.Bandwidth{core.Greedy(10, 1, time.Second).WithID("s"), core.Greedy(50, 1, time.Minute).WithID("m")}}
	tests := []struct {
		name string
		u    Usage
		cost int64
		want string
	}{
		{"bands", Usage{Config: two, Bands: []policy.Band{{Available: 3, Wait: 400 * time.Millisecond}, {Available: 40, Wait: 59 * time.Second}}}, 1,
			`"s";r=3;t=1, "m";r=40;t=59`},
		{"overdraft written as 0", Usage{Config: one, Bands: []policy.Band{{Available: -4, Wait: 5 * time.Second}}}, 1, `"s";r=0;t=5`},
		{"full", Usage{Config: one, Bands: []policy.Band{{Available: 10, Wait: 0}}}, 1, `"s";r=10;t=0`},
		{"never", Usage{Config: one, Bands: []policy.Band{{Available: 10, Wait: math.MaxInt64}}}, 11, `"s";r=10`},
		{"probe only, consumed", Usage{Config: two, Probe: core.Probe{Consumed: true, Remaining: 7, WaitForReset: 2500 * time.Millisecond}}, 1,
			`"s";r=7;t=3, "m";r=7;t=3`},
		{"probe only, refused", Usage{Config: two, Probe: core.Probe{Remaining: 0, WaitForRefill: 1, WaitForReset: 9e9}}, 1,
			`"s";r=0;t=1, "m";r=0;t=1`},
		{"probe only, full", Usage{Config: one, Probe: core.Probe{Consumed: true, Remaining: 10}}, 1, `"s";r=10;t=0`},
		{"probe only, never", Usage{Config: one, Probe: core.Probe{Remaining: 3, WaitForRefill: math.MaxInt64}}, 20, `"s";r=3`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := rateLimitField(tt.u, tt.cost); got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
}

func TestPolicyCache(t *testing.T) {
	var c policyCache
	cfgs := make([]core.Config, policyCacheSize+3)
	for i := range cfgs {
		cfgs[i] = core.Config{Bandwidths: []core.Bandwidth{core.Greedy(int64(i+1), 1, time.Second)}}
	}
	for range 3 {
		for _, cfg := range cfgs {
			if got, want := c.get(cfg.Bandwidths), policyField(cfg); got != want {
				t.Fatalf("cached %s, want %s", got, want)
			}
		}
	}
	// the cache keeps its own copy
	bws := []core.Bandwidth{core.Greedy(7, 7, time.Second).WithID("x")}
	c.get(bws)
	bws[0].Capacity = 8
	if got := c.get(bws); got != `"x";q=8;w=2` {
		t.Errorf("after mutation: %s", got)
	}
}

// TestWriteHeaders wants every field selected, rendered as package policy
// renders it, under its canonical name, and Draft's names too.
func TestWriteHeaders(t *testing.T) {
	u := Usage{Probe: core.Probe{Consumed: true, Remaining: 4, WaitForReset: 1500 * time.Millisecond},
		Config: core.Config{Bandwidths: []core.Bandwidth{core.Greedy(10, 5, time.Second).WithID("s")}}}
	for _, tc := range []struct {
		which policy.Headers
		want  map[string]string
	}{
		{0, map[string]string{}},
		{policy.IETFHeaders, map[string]string{hPolicy: `"s";q=10;w=2`, hRateLimit: `"s";r=4;t=2`}},
		{policy.XRateLimitHeaders, map[string]string{"X-Ratelimit-Limit": "10", "X-Ratelimit-Remaining": "4", "X-Ratelimit-Reset": "2"}},
		{policy.DraftHeaders, map[string]string{"Ratelimit-Limit": "10", "Ratelimit-Remaining": "4", "Ratelimit-Reset": "2"}},
	} {
		h := http.Header{}
		writeHeaders(h, &u, 1, tc.which, policyField(u.Config))
		if len(h) != len(tc.want) {
			t.Errorf("%v: %v, want %v", tc.which, h, tc.want)
		}
		for k, v := range tc.want {
			if got := h[k]; len(got) != 1 || got[0] != v {
				t.Errorf("%v: %s = %q, want %q", tc.which, k, got, v)
			}
		}
	}
}
