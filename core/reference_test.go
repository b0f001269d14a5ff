package core

import (
	"errors"
	"math"
	"testing"
	"time"
)

// The numeric examples of the Bucket4j reference documentation, one test
// each.

const (
	sec    = int64(time.Second)
	minute = int64(time.Minute)
)

func mustBucket(t *testing.T, now int64, bws ...Bandwidth) State {
	t.Helper()
	cfg, err := NewConfig(bws...)
	if err != nil {
		t.Fatalf("NewConfig: %v", err)
	}
	return NewState(cfg, now)
}

func TestAdaptiveInitialTokens(t *testing.T) {
	// 16:20, first refill at 17:00: 40 of 60 minutes left → 266 of 400.
	first := time.Date(2026, 11, 30, 17, 0, 0, 0, time.UTC)
	now := first.Add(-40 * time.Minute).UnixNano()
	b := mustBucket(t, now, IntervallyAlignedAdaptive(400, 400, time.Hour, first))
	if got := b.AvailableTokens(now); got != 266 {
		t.Fatalf("adaptive initial tokens = %d, want 266", got)
	}
	// nothing is added until 17:00, then the full refill arrives
	if got := b.AvailableTokens(first.UnixNano() - 1); got != 266 {
		t.Fatalf("before first refill = %d, want 266", got)
	}
	if got := b.AvailableTokens(first.UnixNano()); got != 400 {
		t.Fatalf("at first refill = %d, want 400", got)
	}
}

func TestReplaceConfigurationExamples(t *testing.T) {
	tests := []struct {
		name     string
		strategy TokensInheritance
		before   int64 // available tokens before
		newCap   int64
		newRefil int64
		want     int64
	}{
		{"PROPORTIONALLY up", InheritProportionally, 40, 200, 10, 80},
		{"PROPORTIONALLY down", InheritProportionally, 40, 20, 10, 8},
		{"AS_IS up", InheritAsIs, 40, 200, 10, 40},
		{"AS_IS down", InheritAsIs, 40, 20, 10, 20},
		{"ADDITIVE up", InheritAdditive, 40, 200, 200, 140},
		{"ADDITIVE down", InheritAdditive, 40, 20, 10, 20},
		{"ADDITIVE same", InheritAdditive, 10, 100, 20, 10},
		{"RESET", InheritReset, 40, 200, 10, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := mustBucket(t, 0, Greedy(100, 10, time.Minute).WithInitialTokens(tt.before))
			cfg, err := NewConfig(Greedy(tt.newCap, tt.newRefil, time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			b.ReplaceConfiguration(cfg, tt.strategy, 0)
			if got := b.AvailableTokens(0); got != tt.want {
				t.Fatalf("after replace = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestGreedyAddsOneTokenPer100ms(t *testing.T) {
	b := mustBucket(t, 0, Greedy(10, 10, time.Second).WithInitialTokens(0))
	step := int64(100 * time.Millisecond)
	for i := int64(1); i <= 10; i++ {
		if got := b.AvailableTokens(i*step - 1); got != i-1 {
			t.Fatalf("at %d×100ms-1ns: %d tokens, want %d", i, got, i-1)
		}
		if got := b.AvailableTokens(i * step); got != i {
			t.Fatalf("at %d×100ms: %d tokens, want %d", i, got, i)
		}
	}
	e := mustBucket(t, 0, Greedy(10, 10, time.Second).WithInitialTokens(0))
	p := e.TryConsumeAndReturnRemaining(1, 0)
	if p.Consumed || int64(p.WaitForRefill) != step || int64(p.WaitForReset) != sec {
		t.Fatalf("probe = %+v, want wait 100ms, reset 1s", p)
	}
}

func TestIntervallyWaitsWholePeriod(t *testing.T) {
	b := mustBucket(t, 0, Intervally(1000, 100, time.Minute).WithInitialTokens(0))
	if got := b.AvailableTokens(minute - 1); got != 0 {
		t.Fatalf("before the period: %d, want 0", got)
	}
	if got := b.AvailableTokens(minute); got != 100 {
		t.Fatalf("after one period: %d, want 100", got)
	}
	if got := b.AvailableTokens(2*minute + 59*sec); got != 200 {
		t.Fatalf("after 2.98 periods: %d, want 200", got)
	}
	e := b.EstimateAbilityToConsume(250, 2*minute+59*sec)
	if e.CanBeConsumed || int64(e.WaitForRefill) != sec {
		t.Fatalf("estimate = %+v, want a 1s wait for the next interval", e)
	}
}

func TestConsumeIgnoringRateLimitsOverdraft(t *testing.T) {
	b := mustBucket(t, 0, Greedy(1000, 1000, time.Minute))
	b.TryConsume(1000, 0)
	wait := b.ConsumeIgnoringRateLimits(121000, 0)
	if wait != 121*minute {
		t.Fatalf("overdraft wait = %v, want 121m (120m beyond a full refill)", time.Duration(wait))
	}
	// Bucket4j's example: an empty-but-refilled bucket of 1000/min asked for
	// 121000 owes 120000 tokens: 120 minutes.
	b2 := mustBucket(t, 0, Greedy(1000, 1000, time.Minute))
	if w := b2.ConsumeIgnoringRateLimits(121000, 0); w != 120*minute {
		t.Fatalf("overdraft wait = %v, want 120m", time.Duration(w))
	}
	if got := b2.AvailableTokens(0); got != -120000 {
		t.Fatalf("tokens after overdraft = %d, want -120000", got)
	}
}

func TestShortBurstTwiceCapacity(t *testing.T) {
	b := mustBucket(t, 0, Greedy(100, 100, time.Minute))
	consumed := 0
	if b.TryConsume(100, 0) {
		consumed += 100
	}
	if b.TryConsume(100, minute) {
		consumed += 100
	}
	if consumed != 200 {
		t.Fatalf("consumed %d within a minute, want the documented 200-token burst", consumed)
	}
	if b.TryConsume(1, minute) {
		t.Fatal("a 201st token must be refused")
	}
}

func TestConstructionErrors(t *testing.T) {
	tests := []struct {
		name string
		bw   Bandwidth
		want error
	}{
		{"2 per ns", Greedy(100, 2, time.Nanosecond), ErrRefillTooFast},
		{"1001 per µs", Greedy(10_000, 1_001, time.Microsecond), ErrRefillTooFast},
		{"1000001 per ms", Greedy(1_000_000, 1_000_001, time.Millisecond), ErrRefillTooFast},
		{"zero capacity", Greedy(0, 1, time.Second), ErrCapacity},
		{"negative capacity", Greedy(-1, 1, time.Second), ErrCapacity},
		{"zero refill", Greedy(1, 0, time.Second), ErrRefillTokens},
		{"zero period", Greedy(1, 1, 0), ErrRefillPeriod},
		{"negative period", Greedy(1, 1, -time.Second), ErrRefillPeriod},
		{"adaptive with initial", IntervallyAlignedAdaptive(10, 10, time.Hour, time.Unix(0, 0)).WithInitialTokens(3), ErrAdaptiveWithInitial},
		{"negative initial", Greedy(10, 1, time.Second).WithInitialTokens(-1), ErrInitialTokens},
		{"unknown style", Bandwidth{Capacity: 1, RefillTokens: 1, RefillPeriod: 1, Style: 9}, ErrUnknownRefillStyle},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewConfig(tt.bw)
			var ce *ConfigError
			if !errors.Is(err, tt.want) || !errors.As(err, &ce) || ce.Bandwidth != 0 {
				t.Fatalf("NewConfig error = %v, want *ConfigError wrapping %v", err, tt.want)
			}
		})
	}
	if _, err := Period(153722867280912930, time.Minute); !errors.Is(err, ErrRefillPeriod) {
		t.Fatalf("Period(153722867280912930 minutes) = %v, want ErrRefillPeriod", err)
	}
	if p, err := Period(math.MaxInt64, time.Nanosecond); err != nil || p != math.MaxInt64 {
		t.Fatalf("Period(MaxInt64 ns) = %v, %v: the longest period must be accepted", p, err)
	}
	if _, err := NewConfig(); !errors.Is(err, ErrNoBandwidths) {
		t.Fatalf("empty config: %v", err)
	}
	_, err := NewConfig(Greedy(1, 1, time.Second).WithID("a"), Greedy(2, 1, time.Second).WithID("a"))
	if !errors.Is(err, ErrDuplicateID) {
		t.Fatalf("duplicate ids: %v", err)
	}
	cfg := Config{Bandwidths: []Bandwidth{IntervallyAligned(1, 1, time.Second, time.Unix(0, 0))}}
	if err := cfg.ValidateForClock(false); !errors.Is(err, ErrNeedsWallClock) {
		t.Fatalf("aligned with monotonic clock: %v", err)
	}
	if err := cfg.ValidateForClock(true); err != nil {
		t.Fatalf("aligned with wall clock: %v", err)
	}
}
