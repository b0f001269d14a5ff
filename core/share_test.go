package core

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"
)

func TestShare(t *testing.T) {
	day := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name      string
		bw        Bandwidth
		n         int
		capacity  int64
		tokens    int64
		period    time.Duration
		initial   int64
		hasInitia bool
	}{
		{"one instance", Greedy(10, 10, time.Second), 1, 10, 10, time.Second, 0, false},
		{"no instance", Greedy(10, 10, time.Second), 0, 10, 10, time.Second, 0, false},
		{"divides", Greedy(12, 6, time.Second), 3, 4, 2, time.Second, 0, false},
		{"capacity rounds up", Greedy(10, 9, time.Second), 3, 4, 3, time.Second, 0, false},
		{"capacity never zero", Greedy(2, 2, time.Second), 5, 1, 2, 5 * time.Second, 0, false},
		{"refill stretched by n/gcd", Greedy(100, 10, time.Second), 4, 25, 5, 2 * time.Second, 0, false},
		{"refill coprime", Greedy(100, 10, time.Second), 3, 34, 10, 3 * time.Second, 0, false},
		{"intervally stretched too", Intervally(100, 10, time.Minute), 3, 34, 10, 3 * time.Minute, 0, false},
		{"aligned keeps its period", IntervallyAligned(1000, 1000, 24*time.Hour, day), 3, 334, 334, 24 * time.Hour, 0, false},
		{"aligned refill never zero", IntervallyAligned(10, 1, time.Hour, day), 3, 4, 1, time.Hour, 0, false},
		{"stretch would overflow", Greedy(10, 2, math.MaxInt64/2), 3, 4, 1, math.MaxInt64 / 2, 0, false},
		{"initial tokens", Greedy(10, 10, time.Second).WithInitialTokens(7), 2, 5, 5, time.Second, 4, true},
		{"zero initial stays zero", Greedy(10, 10, time.Second).WithInitialTokens(0), 2, 5, 5, time.Second, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Config{Bandwidths: []Bandwidth{tt.bw.WithID("x")}}
			s := c.Share(tt.n)
			if err := s.Validate(); err != nil {
				t.Fatalf("share invalid: %v", err)
			}
			b := s.Bandwidths[0]
			if b.Capacity != tt.capacity || b.RefillTokens != tt.tokens || b.RefillPeriod != tt.period ||
				b.InitialTokens != tt.initial || b.HasInitialTokens != tt.hasInitia {
				t.Errorf("share = cap %d, %d per %v, initial %d (%v); want cap %d, %d per %v, initial %d (%v)",
					b.Capacity, b.RefillTokens, b.RefillPeriod, b.InitialTokens, b.HasInitialTokens,
					tt.capacity, tt.tokens, tt.period, tt.initial, tt.hasInitia)
			}
			if b.ID != "x" || b.Style != tt.bw.Style || b.FirstRefill != tt.bw.FirstRefill {
				t.Errorf("share changed id, style or first refill: %+v", b)
			}
			if c.Bandwidths[0] != tt.bw.WithID("x") {
				t.Errorf("Share modified its receiver")
			}
		})
	}
}

// TestShareBounds checks, for random valid bandwidths and instance counts,
// the promises of Share against exact rational arithmetic: never zero, the n
// shares together hold at least the limit and less than the limit plus n
// tokens of capacity, and refill at least the limit's rate (exactly it
// where Share says so, within n-1 tokens per period otherwise).
func TestShareBounds(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	styles := []RefillStyle{RefillGreedy, RefillIntervally, RefillIntervallyAligned, RefillIntervallyAlignedAdaptive}
	for i := 0; i < 20000; i++ {
		period := time.Duration(1 + rng.Int64N(int64(365*24*time.Hour)))
		if i%50 == 0 {
			period = time.Duration(math.MaxInt64 - rng.Int64N(1000))
		}
		tokens := 1 + rng.Int64N(min(int64(period), 1_000_000))
		bw := Bandwidth{Capacity: 1 + rng.Int64N(1_000_000), RefillTokens: tokens, RefillPeriod: period,
			Style: styles[rng.IntN(len(styles))], FirstRefill: rng.Int64N(1e18)}
		c := Config{Bandwidths: []Bandwidth{bw}}
		if err := c.Validate(); err != nil {
			t.Fatalf("generated an invalid bandwidth %+v: %v", bw, err)
		}
		n := 2 + rng.IntN(2000)
		s := c.Share(n)
		if err := s.Validate(); err != nil {
			t.Fatalf("Share(%d) of %+v invalid: %v", n, bw, err)
		}
		b := s.Bandwidths[0]
		k := int64(n)
		if b.Capacity < 1 || b.Capacity*k < bw.Capacity || b.Capacity*k >= bw.Capacity+k {
			t.Fatalf("Share(%d) of capacity %d: %d", n, bw.Capacity, b.Capacity)
		}
		// fleet rate n·r'/p' against r/p, as exact rationals
		fleet := new(big.Rat).SetFrac(big.NewInt(k*b.RefillTokens), big.NewInt(int64(b.RefillPeriod)))
		limit := new(big.Rat).SetFrac(big.NewInt(bw.RefillTokens), big.NewInt(int64(bw.RefillPeriod)))
		if fleet.Cmp(limit) < 0 {
			t.Fatalf("Share(%d) of %d per %d: fleet refills %v < %v", n, bw.RefillTokens, bw.RefillPeriod, fleet, limit)
		}
		if b.RefillPeriod == bw.RefillPeriod {
			if over := k*b.RefillTokens - bw.RefillTokens; over < 0 || over >= k {
				t.Fatalf("Share(%d) of %d per period: %d, %d over", n, bw.RefillTokens, b.RefillTokens, over)
			}
		} else if fleet.Cmp(limit) != 0 {
			t.Fatalf("Share(%d) of %d per %d stretched the period to %d but the rate %v ≠ %v",
				n, bw.RefillTokens, bw.RefillPeriod, b.RefillPeriod, fleet, limit)
		}
	}
}

// TestShareFleet runs n buckets of a share against one of the whole
// configuration, each under a demand it can never meet, and checks that
// over the window the fleet admits at least what the one bucket admits and
// at most one capacity more (plus n-1 tokens a period where Share rounds
// the refill up).
func TestShareFleet(t *testing.T) {
	for _, tt := range []struct {
		bw Bandwidth
		n  int
	}{
		{Greedy(10, 10, time.Second), 3},
		{Greedy(100, 7, time.Second), 4},
		{Intervally(50, 50, time.Minute), 7},
		{Greedy(5, 5, time.Second), 5},
		{Intervally(600, 10, time.Second), 3},
		{IntervallyAligned(60, 60, time.Minute, time.Unix(0, 0)), 7},
	} {
		c := Config{Bandwidths: []Bandwidth{tt.bw}}
		share := c.Share(tt.n)
		one := NewState(c, 0)
		fleet := make([]State, tt.n)
		for i := range fleet {
			fleet[i] = NewState(share.Clone(), 0)
		}
		var single, total int64
		step := int64(10 * time.Millisecond)
		window := int64(10 * time.Minute)
		for now := int64(0); now <= window; now += step {
			single += one.TryConsumeAsMuchAsPossible(math.MaxInt64, now)
			for i := range fleet {
				total += fleet[i].TryConsumeAsMuchAsPossible(math.MaxInt64, now)
			}
		}
		bound := single + tt.bw.Capacity
		if share.Bandwidths[0].RefillPeriod == tt.bw.RefillPeriod && tt.bw.RefillTokens%int64(tt.n) != 0 {
			// refill rounded up: fewer than n extra tokens per period
			bound += window / int64(tt.bw.RefillPeriod) * int64(tt.n-1)
		}
		if total < single || total > bound {
			t.Errorf("%+v over %d instances: fleet admitted %d, one bucket %d (allowed up to %d)",
				tt.bw, tt.n, total, single, bound)
		}
	}
}

// TestShareOfRounding: ShareOf never lets n shares fall below their whole,
// SeenShareOf never lets them hold more than was seen, in debt too.
func TestShareOfRounding(t *testing.T) {
	for _, tc := range []struct {
		a        int64
		n        int
		up, down int64
	}{
		{0, 3, 0, 0}, {1, 3, 1, 0}, {3, 3, 1, 1}, {10, 3, 4, 3}, {7, 1, 7, 7}, {7, 0, 7, 7},
		{-1, 3, 0, -1}, {-3, 3, -1, -1}, {-4, 3, -1, -2},
	} {
		if tc.a >= 0 {
			if got := ShareOf(tc.a, tc.n); got != tc.up {
				t.Errorf("ShareOf(%d, %d) = %d, want %d", tc.a, tc.n, got, tc.up)
			}
		}
		got := SeenShareOf(tc.a, tc.n)
		if got != tc.down {
			t.Errorf("SeenShareOf(%d, %d) = %d, want %d", tc.a, tc.n, got, tc.down)
		}
		if k := int64(max(tc.n, 1)); got*k > tc.a {
			t.Errorf("SeenShareOf(%d, %d) = %d: %d shares hold %d, more than was seen", tc.a, tc.n, got, k, got*k)
		}
	}
}
