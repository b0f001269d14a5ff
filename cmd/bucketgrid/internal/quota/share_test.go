package quota

import (
	"slices"
	"testing"
)

func TestDivide(t *testing.T) {
	cases := []struct {
		name     string
		capacity int64
		wants    []int64
		want     []int64
	}{
		{"fits", 100, []int64{10, 20, 30}, []int64{10, 20, 30}},
		{"by demand, not evenly", 100, []int64{100, 300}, []int64{25, 75}},
		{"remainder by largest fraction", 10, []int64{1, 1, 1}, []int64{1, 1, 1}},
		{"rounding uses all", 10, []int64{3, 3, 3, 3}, []int64{3, 3, 2, 2}},
		{"floor of one for a small want", 100, []int64{1, 100000}, []int64{1, 99}},
		{"no capacity", 0, []int64{5}, []int64{0}},
		{"no wants", 10, []int64{0, 0}, []int64{0, 0}},
		{"capacity below members", 2, []int64{5, 5, 5}, []int64{1, 1, 0}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := divide(c.capacity, c.wants)
			if !slices.Equal(got, c.want) {
				t.Fatalf("divide(%d, %v) = %v, want %v", c.capacity, c.wants, got, c.want)
			}
			var sum int64
			for _, g := range got {
				sum += g
			}
			if sum > c.capacity {
				t.Fatalf("shares sum to %d, above %d", sum, c.capacity)
			}
		})
	}
}

func TestMulDiv(t *testing.T) {
	if got := mulDiv(1<<40, 1<<40, 1<<20, false); got != 1<<60 {
		t.Fatalf("mulDiv wide = %d", got)
	}
	if got := mulDiv(7, 3, 2, true); got != 11 {
		t.Fatalf("ceil = %d", got)
	}
	if got := mulDiv(1<<62, 1<<62, 1, false); got != 1<<63-1 {
		t.Fatalf("saturation = %d", got)
	}
}

// TestBindOrder: a bucket id is a map; its entries match the rule whatever
// order the rule file nests them in.
func TestBindOrder(t *testing.T) {
	f := newFleet(t, `
domain: o
descriptors:
  - key: zone
    descriptors:
      - key: api_key
        rate_limit: {unit: second, requests_per_unit: 10}
`, Options{})
	b := bind(f.cfg, "o", map[string]string{"api_key": "k", "zone": "eu"}, f.srv.opts.Period)
	if b.kind != limited || b.perPeriod != 50 || !b.window {
		t.Fatalf("binding %+v, want the nested fixed window of 10/s", b)
	}
	if b := bind(f.cfg, "o", map[string]string{"api_key": "k"}, f.srv.opts.Period); b.kind != allowAll {
		t.Fatalf("a partial id bound %+v, want ALLOW_ALL (no rule at its depth)", b)
	}
}
