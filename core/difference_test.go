package core

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

// One test per deliberate difference from Bucket4j listed in the package
// doc ("Differences from Bucket4j"), so that a change of behaviour fails here
// before the documentation goes stale. The Bucket4j values in the comments
// are derived by hand from Bucket4j 8.19's BucketState64BitsInteger.

func TestDifferenceWaitsRoundedUp(t *testing.T) {
	// 3 tokens per second, empty: one token needs 1e9/3 = 333 333 333.3 ns.
	// Bucket4j floors: (1×1e9 − 0)/3 = 333 333 333.
	const exact = 333_333_334
	b := mustBucket(t, 0, Greedy(10, 3, time.Second).WithInitialTokens(0))
	if p := b.TryConsumeAndReturnRemaining(1, 0); p.WaitForRefill != exact || p.WaitForReset != 3_333_333_334 {
		t.Fatalf("probe %+v, want waits 333333334 and 3333333334 (Bucket4j ...333 and ...333)", p)
	}
	if early := b.Clone(); early.TryConsume(1, exact-1) {
		t.Fatal("a token at Bucket4j's floored wait: at 333 333 333 ns only 0.999999999 token exists")
	}
	if due := b.Clone(); !due.TryConsume(1, exact) {
		t.Fatal("no token at the rounded-up wait")
	}
	// Reserve decides against maxWait with the rounded-up wait too
	r := b.Clone()
	if w := r.Reserve(1, exact-1, 0); w != math.MaxInt64 {
		t.Fatalf("Reserve(1, 333333333) = %d, want refused (Bucket4j grants it)", w)
	}
	if w := r.Reserve(1, exact, 0); w != exact {
		t.Fatalf("Reserve(1, 333333334) = %d, want %d", w, exact)
	}
}

func TestDifferenceExactArithmetic(t *testing.T) {
	t.Run("PROPORTIONALLY without doubles", func(t *testing.T) {
		// capacity 22 → 30 with 11 tokens: 11×30/22 = 15. Bucket4j computes
		// 11.0×(30.0/22.0) = 14.999999999999998 and keeps 14.
		for _, nb := range []Bandwidth{Intervally(30, 30, time.Minute), Greedy(30, 30, time.Minute)} {
			b := mustBucket(t, 0, Greedy(22, 22, time.Minute).WithInitialTokens(11))
			b.ReplaceConfiguration(Config{Bandwidths: []Bandwidth{nb}}, InheritProportionally, 0)
			if s := b.Bands[0]; s.Size != 15 || s.RoundingError != 0 {
				t.Fatalf("%v: %+v, want 15 tokens and no fraction", nb.Style, s)
			}
		}
	})
	t.Run("refill beyond 64 bits", func(t *testing.T) {
		// 1.25e9 tokens per 10 s (125 MB/s as bytes). At 1 ns: 1.25e9×1 of
		// the 1e10 a token needs is carried (1/8 token). At 8 s:
		// 1.25e9×7 999 999 999 overflows int64; Bucket4j's fallback
		// (long)(7999999999/1e10×1.25e9) = 999 999 999 drops the carried 1/8.
		// Exactly: 1.25e9×8e9/1e10 = 1e9.
		b := mustBucket(t, 0, Greedy(2e9, 1.25e9, 10*time.Second).WithInitialTokens(1))
		if !b.TryConsume(1, 1) || b.Bands[0].RoundingError != 1.25e9 {
			t.Fatalf("setup: %+v", b.Bands[0])
		}
		if got := b.AvailableTokens(8 * sec); got != 1e9 {
			t.Fatalf("available at 8 s = %d, want 1000000000 (Bucket4j 999999999)", got)
		}
	})
	t.Run("greedy wait beyond 64 bits", func(t *testing.T) {
		// a debt of 1e10 tokens at 3 per second: 1e9×1e10 overflows int64.
		// Exactly ceil(1e19/3) = 3333333333333333334 ns; Bucket4j's
		// (long)(1e10/3.0×1e9) = 3333333333333333504, 170 ns late.
		b := mustBucket(t, 0, Greedy(10, 3, time.Second))
		if w := b.ConsumeIgnoringRateLimits(10_000_000_010, 0); w != 3333333333333333334 {
			t.Fatalf("wait %d, want 3333333333333333334", w)
		}
	})
}

func TestDifferenceGreedyWaitWhenClockBehind(t *testing.T) {
	// empty, last refilled at 10 s; asked at 9.5 s. Bucket4j's greedy wait
	// ignores the current time: 100 ms, but at 9.6 s nothing has refilled.
	b := mustBucket(t, 10*sec, Greedy(10, 10, time.Second).WithInitialTokens(0))
	p := b.TryConsumeAndReturnRemaining(1, 9500*ms)
	if p.WaitForRefill != time.Duration(600*ms) || p.WaitForReset != time.Duration(1500*ms) {
		t.Fatalf("probe at 9.5 s = %+v, want waits 600 ms and 1.5 s (Bucket4j 100 ms and 1 s)", p)
	}
	// the wait is exact: the token is there after it, not a nanosecond sooner
	if at := b.Clone(); !at.TryConsume(1, 10100*ms) {
		t.Fatal("refused at 9.5 s + 600 ms")
	}
	if before := b.Clone(); before.TryConsume(1, 10100*ms-1) {
		t.Fatal("a token 1 ns before the wait ends")
	}
	// intervally waits count from the last refill in Bucket4j too
	iv := mustBucket(t, 10*sec, Intervally(10, 10, time.Second).WithInitialTokens(0))
	if e := iv.EstimateAbilityToConsume(1, 9500*ms); e.WaitForRefill != time.Duration(1500*ms) {
		t.Fatalf("intervally estimate = %+v, want 1.5 s", e)
	}
}

func TestDifferenceReplacementLastRefill(t *testing.T) {
	first := time.Date(2026, 12, 1, 17, 0, 0, 0, time.UTC)
	at1620 := first.Add(-40 * time.Minute).UnixNano()
	type reading struct{ at, want int64 }
	tests := []struct {
		name     string
		old, new Bandwidth // old starts empty at start
		start    int64
		at       int64 // of the AS_IS replacement
		readings []reading
	}{
		// Bucket4j keeps the last refill at 0 and mints 59 periods of 10 at
		// once: 100 tokens at 59 min
		{"intervally, another period", Intervally(100, 100, time.Hour), Intervally(100, 10, time.Minute),
			0, 59 * minute, []reading{{59 * minute, 0}, {60*minute - 1, 0}, {60 * minute, 10}}},
		// as in Bucket4j: the phase is kept, the next refill stays at the hour
		{"intervally, same period keeps the phase", Intervally(100, 100, time.Hour), Intervally(50, 100, time.Hour),
			0, 30 * minute, []reading{{60*minute - 1, 0}, {60 * minute, 50}}},
		// Bucket4j refills from 0 at the greedy rate: 30 tokens at 30 min
		{"intervally to greedy", Intervally(60, 60, time.Hour), Greedy(60, 60, time.Hour),
			0, 30 * minute, []reading{{30 * minute, 0}, {31 * minute, 1}}},
		// an hourly bandwidth aligned to 17:00 replacing a greedy one at
		// 16:20 refills at 17:00; Bucket4j keeps 16:20 and refills at 17:20
		{"to aligned", Greedy(10, 10, time.Hour), IntervallyAligned(10, 10, time.Hour, first),
			at1620, at1620, []reading{{first.UnixNano() - 1, 0}, {first.UnixNano(), 10}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := mustBucket(t, tt.start, tt.old.WithInitialTokens(0))
			b.ReplaceConfiguration(Config{Bandwidths: []Bandwidth{tt.new}}, InheritAsIs, tt.at)
			for _, r := range tt.readings {
				if got := b.AvailableTokens(r.at); got != r.want {
					t.Fatalf("at %v: %d tokens, want %d", time.Duration(r.at-tt.start), got, r.want)
				}
			}
		})
	}
}

func TestDifferenceFractionRescaledExactly(t *testing.T) {
	// 10 per second, empty at 0: at 150 ms 1 token and half a token carried
	// (5e8 of 1e9). AS_IS to 10 per 500 ms: half a token is 2.5e8 of 5e8.
	// Bucket4j: (long)(5e8/1e9) × 5e8 = 0 × 5e8: the fraction is dropped.
	b := mustBucket(t, 0, Greedy(10, 10, time.Second).WithInitialTokens(0))
	b.ReplaceConfiguration(Config{Bandwidths: []Bandwidth{Greedy(10, 10, 500*time.Millisecond)}}, InheritAsIs, 150*ms)
	if s := b.Bands[0]; s.Size != 1 || s.RoundingError != 2.5e8 {
		t.Fatalf("state %+v, want 1 token and 2.5e8 carried", s)
	}
	// at 175 ms: 10×2.5e7 + 2.5e8 = 5e8, one more token (Bucket4j: 2.5e8, none)
	if got := b.AvailableTokens(175 * ms); got != 2 {
		t.Fatalf("at 175 ms %d tokens, want 2 (Bucket4j 1)", got)
	}
}

func TestDifferenceReserveAboveCapacity(t *testing.T) {
	// full, capacity 10, a reservation of 15. Bucket4j's blocking consume
	// computes the wait without the capacity check: 500 ms, leaving -5.
	b := mustBucket(t, 0, Greedy(10, 10, time.Second))
	if w := b.Reserve(15, math.MaxInt64, 0); w != math.MaxInt64 || b.AvailableTokens(0) != 10 {
		t.Fatalf("Reserve(15) = %d with %d tokens left, want refused and 10", w, b.AvailableTokens(0))
	}
	// overdraft on purpose stays possible, as in Bucket4j
	if w := b.ConsumeIgnoringRateLimits(15, 0); w != 500*ms || b.AvailableTokens(0) != -5 {
		t.Fatalf("ConsumeIgnoringRateLimits(15) = %d, %d left; want 500 ms and -5", w, b.AvailableTokens(0))
	}
}

func TestDifferenceReserveMaxWaitZero(t *testing.T) {
	// Bucket4j throws for maxWaitTimeNanos ≤ 0; zero here means "only now"
	b := mustBucket(t, 0, Greedy(10, 10, time.Second).WithInitialTokens(1))
	if w := b.Reserve(1, 0, 0); w != 0 {
		t.Fatalf("Reserve(1, 0) with 1 token = %d, want 0 (taken)", w)
	}
	if w := b.Reserve(1, 0, 0); w != math.MaxInt64 {
		t.Fatalf("Reserve(1, 0) with none = %d, want refused", w)
	}
}

func TestDifferenceFirstRefillNanoseconds(t *testing.T) {
	// first refill 500 ns after a whole millisecond. Bucket4j keeps
	// toEpochMilli() and refills at the millisecond.
	whole := time.Date(2026, 12, 1, 17, 0, 0, 0, time.UTC)
	first := whole.Add(500 * time.Nanosecond)
	b := mustBucket(t, whole.Add(-30*time.Minute).UnixNano(),
		IntervallyAligned(10, 10, time.Hour, first).WithInitialTokens(0))
	if got := b.AvailableTokens(whole.UnixNano()); got != 0 {
		t.Fatalf("at the whole millisecond %d tokens, want 0 (Bucket4j 10)", got)
	}
	if got := b.AvailableTokens(first.UnixNano()); got != 10 {
		t.Fatalf("at the first refill %d tokens, want 10", got)
	}
}

func TestDifferenceValidationLimits(t *testing.T) {
	many := make([]Bandwidth, MaxBandwidths+1)
	for i := range many {
		many[i] = Greedy(1, 1, time.Second)
	}
	first := time.Date(2026, 12, 1, 17, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		bws  []Bandwidth
		want error
	}{
		{"33 bandwidths", many, ErrTooManyBandwidths},
		{"32 bandwidths", many[:MaxBandwidths], nil},
		{"256-byte id", []Bandwidth{Greedy(1, 1, time.Second).WithID(strings.Repeat("x", 256))}, ErrIDTooLong},
		{"255-byte id", []Bandwidth{Greedy(1, 1, time.Second).WithID(strings.Repeat("x", 255))}, nil},
		// Bucket4j tells "" from null: two "" ids are duplicates there
		{"two empty ids are anonymous", []Bandwidth{Greedy(1, 1, time.Second).WithID(""), Greedy(2, 1, time.Second).WithID("")}, nil},
		{"first refill after 2262", []Bandwidth{IntervallyAligned(1, 1, time.Second, time.Date(2263, 1, 1, 0, 0, 0, 0, time.UTC))}, ErrFirstRefill},
		{"first refill in 2026", []Bandwidth{IntervallyAligned(1, 1, time.Second, first)}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewConfig(tt.bws...)
			if (tt.want == nil) != (err == nil) || !errors.Is(err, tt.want) && tt.want != nil {
				t.Fatalf("NewConfig = %v, want %v", err, tt.want)
			}
		})
	}
	// an empty id follows the anonymous rule on replacement: it matches the
	// one anonymous bandwidth of the old configuration
	b := mustBucket(t, 0, Greedy(10, 10, time.Second).WithInitialTokens(4))
	b.ReplaceConfiguration(Config{Bandwidths: []Bandwidth{Greedy(20, 10, time.Second).WithID("")}}, InheritAsIs, 0)
	if got := b.AvailableTokens(0); got != 4 {
		t.Fatalf("after AS_IS to an empty id: %d tokens, want the 4 carried over", got)
	}
	// aligned styles need a wall clock, as with Bucket4j's local builder
	cfg := Config{Bandwidths: []Bandwidth{IntervallyAligned(1, 1, time.Second, first)}}
	if err := cfg.ValidateForClock(false); !errors.Is(err, ErrNeedsWallClock) {
		t.Fatalf("aligned without a wall clock: %v", err)
	}
}
