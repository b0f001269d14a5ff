package core

import (
	"bytes"
	"errors"
	"math"
	"testing"
	"time"
)

// Regression tests for the five Bucket4j parity bugs of issue #12, one per
// bug and named after it. The expected values are Bucket4j 8.19's, derived
// by hand from BucketState64BitsInteger, ConsumptionProbe, EstimationProbe
// and BandwidthBuilder; each comment shows the arithmetic.

const ms = int64(time.Millisecond)

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

	bad := &Config{Bandwidths: []Bandwidth{IntervallyAligned(10, 10, time.Second, minusOneMs)}}
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC).UnixNano()
	b := mustBucket(t, now, Greedy(10, 10, time.Second))
	b.TryConsume(3, now)
	stored := AppendBucket(nil, &b)
	keep := bytes.Clone(stored)
	for name, req := range map[string]Request{
		"create":  {Mode: ModeCreateIfAbsent, Config: bad, Ops: consume(1)},
		"replace": {Ops: []Op{{Kind: OpReplaceConfiguration, Config: bad, Inheritance: InheritAsIs}}},
		"create or replace": {Mode: ModeCreateOrReplace, Config: bad, ConfigVersion: 1,
			Ops: []Op{{Kind: OpAvailableTokens}}},
	} {
		t.Run(name, func(t *testing.T) {
			out, changed, resp := Process(stored, req, now)
			if resp.Status != StatusInvalidRequest || changed || !bytes.Equal(out, keep) || !bytes.Equal(stored, keep) {
				t.Fatalf("status %v changed %v: the bucket must be left untouched", resp.Status, changed)
			}
			if !errors.Is(resp.Err(), ErrInvalidRequest) {
				t.Fatalf("Err() = %v", resp.Err())
			}
		})
	}

	// a stored record with such a bandwidth, written by an older version, is
	// corrupt for this one: a typed error, never a panic
	old := NewBucket(*bad, now)
	_, err := DecodeBucket(AppendBucket(nil, &old))
	if !errors.Is(err, ErrCorrupt) || !errors.Is(err, ErrFirstRefill) {
		t.Fatalf("DecodeBucket = %v, want ErrCorrupt wrapping ErrFirstRefill", err)
	}
}
