package core

import (
	"errors"
	"math"
	"testing"
	"time"
)

// Regression tests for five Bucket4j parity bugs, one per
// bug and named after it. The expected values are Bucket4j 8.19's, derived
// by hand from BucketState64BitsInteger, ConsumptionProbe, EstimationProbe
// and BandwidthBuilder; each comment shows the arithmetic.

const ms = int64(time.Millisecond)

// Bug 1: probes reported negative remaining tokens during an overdraft.
// Bucket4j's ConsumptionProbe and EstimationProbe constructors store
// max(0, remaining); getAvailableTokens and the verbose Diagnostics report the
// raw, negative balance.
func TestProbesReportNegativeRemaining(t *testing.T) {
	// capacity 1000, greedy 1000 per minute, full; ConsumeIgnoringRateLimits(121000)
	// leaves -120000 and a 120-minute debt
	overdrawn := func(t *testing.T) State {
		t.Helper()
		b := mustBucket(t, 0, Greedy(1000, 1000, time.Minute))
		if w := b.ConsumeIgnoringRateLimits(121000, 0); w != 120*minute {
			t.Fatalf("overdraft wait %v, want 120m", time.Duration(w))
		}
		return b
	}
	// a wait for n tokens from -120000 is (120000+n)×60 s/1000 = (120000+n)×60 ms,
	// exact, so Bucket4j's floor and our ceiling agree
	const oneToken = (120000 + 1) * 60 * ms
	const full = 121000 * 60 * ms
	tests := []struct {
		name string
		run  func(b *State) any
		want any
	}{
		{"TryConsumeAndReturnRemaining", func(b *State) any { return b.TryConsumeAndReturnRemaining(1, 0) },
			Probe{Remaining: 0, WaitForRefill: time.Duration(oneToken), WaitForReset: time.Duration(full)}},
		{"TryConsumeAndReturnRemaining above capacity", func(b *State) any { return b.TryConsumeAndReturnRemaining(1001, 0) },
			Probe{Remaining: 0, WaitForRefill: math.MaxInt64, WaitForReset: time.Duration(full)}},
		{"TryConsumeAndReturnRemaining a minute later", func(b *State) any { return b.TryConsumeAndReturnRemaining(1, minute) },
			Probe{Remaining: 0, WaitForRefill: time.Duration(oneToken - minute), WaitForReset: time.Duration(full - minute)}},
		{"EstimateAbilityToConsume", func(b *State) any { return b.EstimateAbilityToConsume(1, 0) },
			Estimate{Remaining: 0, WaitForRefill: time.Duration(oneToken)}},
		{"AvailableTokens stays negative", func(b *State) any { return b.AvailableTokens(0) }, int64(-120000)},
		{"Diagnostics stay negative", func(b *State) any { return b.Diagnose(0).Available[0] }, int64(-120000)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := overdrawn(t)
			if got := tt.run(&b); got != tt.want {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}

	t.Run("several bandwidths", func(t *testing.T) {
		// the minimum is negative in one bandwidth only: still 0
		b := mustBucket(t, 0, Greedy(1000, 1000, time.Minute).WithID("a"), Greedy(5, 5, time.Second).WithID("b"))
		b.ConsumeIgnoringRateLimits(7, 0) // a: 993, b: -2
		if p := b.TryConsumeAndReturnRemaining(1, 0); p.Consumed || p.Remaining != 0 || p.WaitForRefill != time.Duration(600*ms) {
			t.Fatalf("probe %+v, want remaining 0 and a 600 ms wait (3 tokens at 5/s)", p)
		}
	})
}

// Bug 2: an aligned first refill before the epoch was accepted. Bucket4j's
// BandwidthBuilder throws for timeOfFirstRefill.toEpochMilli() < 0, so such a
// bandwidth can neither create a bucket nor replace a configuration.
func TestFirstRefillBeforeEpoch(t *testing.T) {
	minusOneMs := time.UnixMilli(-1)
	tests := []struct {
		name string
		bw   Bandwidth
		want error // nil: valid
	}{
		{"aligned at -1 ms", IntervallyAligned(10, 10, time.Second, minusOneMs), ErrFirstRefill},
		{"adaptive at -1 ms", IntervallyAlignedAdaptive(10, 10, time.Second, minusOneMs), ErrFirstRefill},
		{"aligned at -1 ns", IntervallyAligned(10, 10, time.Second, time.Unix(0, -1)), ErrFirstRefill},
		{"raw FirstRefill -1", Bandwidth{Capacity: 1, RefillTokens: 1, RefillPeriod: 1, Style: RefillIntervallyAligned, FirstRefill: -1}, ErrFirstRefill},
		{"aligned in the year 1000", IntervallyAligned(10, 10, time.Second, time.Date(1000, 1, 1, 0, 0, 0, 0, time.UTC)), ErrFirstRefill},
		// past 2262 UnixNano wraps around; Bucket4j's millis×1e6 wraps the same way
		{"aligned in 2300", IntervallyAligned(10, 10, time.Second, time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)), ErrFirstRefill},
		{"aligned at the epoch", IntervallyAligned(10, 10, time.Second, time.Unix(0, 0)), nil},
		{"aligned at the last int64 instant", IntervallyAligned(10, 10, time.Second, time.Unix(0, math.MaxInt64)), nil},
		{"greedy ignores FirstRefill", Bandwidth{Capacity: 1, RefillTokens: 1, RefillPeriod: 1, FirstRefill: -1}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewConfig(Greedy(5, 5, time.Second).WithID("other"), tt.bw)
			var ce *ConfigError
			if tt.want == nil {
				if err != nil {
					t.Fatalf("NewConfig = %v, want valid", err)
				}
				return
			}
			if !errors.Is(err, tt.want) || !errors.As(err, &ce) || ce.Bandwidth != 1 {
				t.Fatalf("NewConfig = %v, want a *ConfigError for bandwidth 1 wrapping %v", err, tt.want)
			}
		})
	}

}

// Bug 3: replacing the configuration of an over-full bandwidth (after
// ForceAddTokens) exceeded the new capacity. Bucket4j's replaceBandwidth*
// methods fill the bandwidth to the new capacity when its size is at or above
// the old capacity (PROPORTIONALLY, ADDITIVE with a larger capacity) and cap
// it at the new capacity (AS_IS, and ADDITIVE without a larger capacity).
func TestReplaceOverFullBand(t *testing.T) {
	greedy := func(capacity int64) Config {
		return Config{Bandwidths: []Bandwidth{Greedy(capacity, 10, time.Second)}}
	}
	t.Run("issue scenario", func(t *testing.T) {
		// capacity 100, greedy 10/s, full; ForceAddTokens(500) → 600, refill
		// paused; at 5 s TryConsume(450) → 150, still above capacity
		b := mustBucket(t, 0, Greedy(100, 10, time.Second))
		b.ForceAddTokens(500, 0)
		if !b.TryConsume(450, 5*sec) || b.AvailableTokens(5*sec) != 150 {
			t.Fatalf("setup: %d tokens, want 150", b.AvailableTokens(5*sec))
		}
		// PROPORTIONALLY to 300: 150 ≥ old capacity 100 → 300 (was 150×3 = 450)
		b.ReplaceConfiguration(greedy(300), InheritProportionally, 5*sec)
		if got := b.AvailableTokens(5 * sec); got != 300 {
			t.Fatalf("after PROPORTIONALLY to 300: %d tokens, want 300", got)
		}
		// ADDITIVE to 400: 300 ≥ old capacity 300 → 400 (was min(450, 400)+100 = 500)
		b.ReplaceConfiguration(greedy(400), InheritAdditive, 6*sec)
		if got := b.AvailableTokens(6 * sec); got != 400 {
			t.Fatalf("after ADDITIVE to 400: %d tokens, want 400", got)
		}
	})
	tests := []struct {
		name     string
		strategy TokensInheritance
		newCap   int64
		want     int64
	}{
		// 150 tokens in a bandwidth of capacity 100
		{"PROPORTIONALLY up", InheritProportionally, 300, 300},       // was 450
		{"PROPORTIONALLY down", InheritProportionally, 50, 50},       // was 75
		{"ADDITIVE up", InheritAdditive, 400, 400},                   // was 150+300
		{"ADDITIVE up, below the tokens", InheritAdditive, 120, 120}, // was min(150, 120)+20
		{"ADDITIVE down is AS_IS", InheritAdditive, 80, 80},
		{"AS_IS down", InheritAsIs, 120, 120},
		{"AS_IS up keeps the forced tokens", InheritAsIs, 300, 150}, // below the new capacity
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := mustBucket(t, 0, Greedy(100, 10, time.Second))
			b.ForceAddTokens(50, 0)
			b.ReplaceConfiguration(greedy(tt.newCap), tt.strategy, sec)
			if got := b.AvailableTokens(sec); got != tt.want {
				t.Fatalf("%d tokens, want %d", got, tt.want)
			}
			if b.Bands[0].RoundingError != 0 {
				t.Fatalf("rounding error %d, want 0", b.Bands[0].RoundingError)
			}
		})
	}
}

// Bug 4: ForceAddTokens dropped the partial token. Bucket4j's forceAddTokens
// leaves the rounding error alone (it zeroes it only when the sum overflows),
// and refill keeps it while the bandwidth is at or above capacity, so it
// counts again as soon as consumption brings the bandwidth below.
func TestForceAddTokensKeepsPartialToken(t *testing.T) {
	// capacity 10, greedy 10 per µs (one token per 100 ns), full at 0
	b := mustBucket(t, 0, Greedy(10, 10, time.Microsecond))
	b.TryConsume(1, 0) // 9
	// at 67 ns: 10×67 = 670 of the 1000 a token needs; +1 forced → 10
	b.ForceAddTokens(1, 67)
	if s := b.Bands[0]; s.Size != 10 || s.RoundingError != 670 {
		t.Fatalf("after ForceAddTokens: %+v, want size 10, rounding error 670 kept", s)
	}
	b.TryConsume(1, 67) // 9, the 670 still carried
	// at 134 ns: 670 + 10×67 = 1340 → one more token → 10, the capacity
	// (full: nothing carried). Bucket4j admits 10 tokens here; dropping the
	// 670 refused them with a 33 ns wait (1000-670 = 330 more, at 10 per ns).
	p := b.TryConsumeAndReturnRemaining(10, 134)
	// after it: empty, full again after 10×100 ns
	if want := (Probe{Consumed: true, Remaining: 0, WaitForReset: 1000}); p != want {
		t.Fatalf("TryConsumeAndReturnRemaining(10) at 134 ns = %+v, want %+v", p, want)
	}
	// the fraction also survives a stay above capacity: at 200 ns 660 is
	// carried (66 ns into the next token) and 15 forced tokens pause refill;
	// at 300 ns 6 are taken: 9 left, 660 still carried, so the 10th token
	// arrives 34 ns later (340+660 = 1000), not 100
	b.ForceAddTokens(15, 200)
	if s := b.Bands[0]; s.Size != 15 || s.RoundingError != 660 {
		t.Fatalf("after ForceAddTokens(15) at 200 ns: %+v, want 15 tokens and 660 carried", s)
	}
	if !b.TryConsume(6, 300) || b.Bands[0].RoundingError != 660 {
		t.Fatalf("at 300 ns: %+v, want 9 tokens and 660 still carried", b.Bands[0])
	}
	if e := b.EstimateAbilityToConsume(10, 300); e.WaitForRefill != 34 {
		t.Fatalf("estimate for 10 at 300 ns = %+v, want a 34 ns wait", e)
	}
	if b.TryConsume(10, 333) || !b.TryConsume(10, 334) {
		t.Fatal("the 10th token must arrive at 334 ns exactly")
	}

	// a sum beyond int64 saturates and, as in Bucket4j, drops the fraction
	b = mustBucket(t, 0, Greedy(10, 10, time.Microsecond))
	b.TryConsume(1, 0)
	b.ForceAddTokens(math.MaxInt64, 67)
	if s := b.Bands[0]; s.Size != math.MaxInt64 || s.RoundingError != 0 {
		t.Fatalf("after an overflowing ForceAddTokens: %+v, want MaxInt64 and no fraction", s)
	}
}

// Bug 5: configuration replacement dropped the partial token unless period,
// tokens and style were all equal. Bucket4j's replaceBandwidthAsIs and
// ...Additive carry the rounding error between greedy bandwidths, rescaled
// to the new period; ...Proportional scales size and fraction together and
// keeps the new fraction when the new bandwidth is greedy.
func TestReplacementKeepsPartialToken(t *testing.T) {
	tests := []struct {
		name          string
		strategy      TokensInheritance
		new           Bandwidth
		size, carried int64 // right after the replacement at 150 ms
		at, want      int64 // then available tokens at at
	}{
		// to 10 per 2.5 s: half a token is 1.25e9 of 2.5e9 (Bucket4j keeps
		// (long)2.5×5e8 = 1e9, 0.4 token: a deliberate difference). At
		// 300 ms: 10×0.15 s = 1.5e9, +1.25e9 ≥ 2.5e9: one token → 2, as
		// Bucket4j (1.5e9+1e9 = 2.5e9); dropping the fraction gave 1.
		{"AS_IS to a longer period", InheritAsIs, Greedy(10, 10, 2500*time.Millisecond), 1, 1.25e9, 300 * ms, 2},
		// to capacity 20, 20 per 2 s (the same rate): 1+10 = 11 tokens, half
		// a token = 1e9 of 2e9 (Bucket4j: (long)2.0×5e8, the same). At
		// 200 ms: 20×5e7 = 1e9, +1e9 = 2e9: one more token → 12 (was 11).
		{"ADDITIVE with another refill", InheritAdditive, Greedy(20, 20, 2*time.Second), 11, 1e9, 200 * ms, 12},
		// to capacity 25, 10 per 4 s: (1 + 0.5)×25/10 = 3.75 → 3 tokens,
		// 0.75 token = 3e9 of 4e9 (Bucket4j's doubles: 1.5×2.5 = 3.75
		// exactly, (long)(0.75×4e9) = 3e9); ignoring the fraction gave 2.
		// The 4th token needs (4e9−3e9)/10 ns = 100 ms.
		{"PROPORTIONALLY", InheritProportionally, Greedy(25, 10, 4*time.Second), 3, 3e9, 250 * ms, 4},
		// the scaled size counts the fraction, an intervally bandwidth carries none
		{"PROPORTIONALLY to intervally", InheritProportionally, Intervally(25, 10, 4*time.Second), 3, 0, 4150*ms - 1, 3},
		{"AS_IS to intervally", InheritAsIs, Intervally(10, 10, time.Second), 1, 0, 1150*ms - 1, 1},
		// 1 token is at the new capacity: full, nothing carried
		{"AS_IS capped at the new capacity", InheritAsIs, Greedy(1, 10, time.Second), 1, 0, 150 * ms, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// capacity 10, greedy 10 per second, empty at 0; at 150 ms
			// 10×0.15 = 1.5 tokens: 1, and half a token (5e8 of 1e9) carried
			b := mustBucket(t, 0, Greedy(10, 10, time.Second).WithInitialTokens(0))
			b.ReplaceConfiguration(Config{Bandwidths: []Bandwidth{tt.new}}, tt.strategy, 150*ms)
			if s := b.Bands[0]; s.Size != tt.size || s.RoundingError != tt.carried {
				t.Fatalf("after the replacement %+v, want %d tokens and %d carried", s, tt.size, tt.carried)
			}
			if got := b.AvailableTokens(tt.at); got != tt.want {
				t.Fatalf("at %v: %d tokens, want %d", time.Duration(tt.at), got, tt.want)
			}
		})
	}
	// PROPORTIONALLY's time to full: (22×4e9 − 3e9)/10 = 8.5 s (was 23×0.4 s = 9.2 s)
	b := mustBucket(t, 0, Greedy(10, 10, time.Second).WithInitialTokens(0))
	b.ReplaceConfiguration(Config{Bandwidths: []Bandwidth{Greedy(25, 10, 4*time.Second)}}, InheritProportionally, 150*ms)
	if got := b.TimeToFull(150 * ms); got != 8500*ms {
		t.Fatalf("time to full %v, want 8.5s", time.Duration(got))
	}
}
