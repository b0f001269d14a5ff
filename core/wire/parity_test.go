package wire

import (
	"bytes"
	"errors"
	"github.com/bucketgrid/bucketgrid/core"
	"testing"
	"time"
)

// The Bucket4j parity regressions of package core, through Process.

const ms = int64(time.Millisecond)

func mustState(t *testing.T, now int64, bws ...core.Bandwidth) core.State {
	t.Helper()
	cfg, err := core.NewConfig(bws...)
	if err != nil {
		t.Fatalf("NewConfig: %v", err)
	}
	return core.NewState(cfg, now)
}

// Probes report no negative remaining tokens during an overdraft, while
// AvailableTokens and the Diagnostics report the raw balance.
func TestProbesReportNegativeRemaining(t *testing.T) {
	const minute = int64(time.Minute)
	const oneToken = (120000 + 1) * 60 * ms
	const full = 121000 * 60 * ms
	b := mustState(t, 0, core.Greedy(1000, 1000, time.Minute))
	if w := b.ConsumeIgnoringRateLimits(121000, 0); w != 120*minute {
		t.Fatalf("overdraft wait %v, want 120m", time.Duration(w))
	}
	stored := AppendState(nil, &b)
	_, changed, resp := Process(stored, Request{Verbose: true, Ops: []Op{
		{Kind: OpTryConsumeAndReturnRemaining, Tokens: 1},
		{Kind: OpEstimate, Tokens: 1},
		{Kind: OpAvailableTokens},
	}}, 0)
	if resp.Status != StatusOK || changed {
		t.Fatalf("status %v changed %v: %s", resp.Status, changed, resp.Message)
	}
	want := []Result{{Wait: oneToken, Reset: full}, {Wait: oneToken}, {OK: true, Tokens: -120000}}
	for i, r := range resp.Results {
		if r != want[i] {
			t.Errorf("result %d = %+v, want %+v", i, r, want[i])
		}
	}
	if d := resp.Diagnostics; d == nil || d.Available[0] != -120000 || d.TimeToFull != time.Duration(full) {
		t.Errorf("diagnostics %+v, want the raw -120000 tokens", d)
	}
}

// An aligned first refill before the epoch can neither create a bucket nor
// replace a configuration, and a stored one is corrupt.
func TestFirstRefillBeforeEpoch(t *testing.T) {
	minusOneMs := time.UnixMilli(-1)
	bad := &core.Config{Bandwidths: []core.Bandwidth{core.IntervallyAligned(10, 10, time.Second, minusOneMs)}}
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC).UnixNano()
	b := mustState(t, now, core.Greedy(10, 10, time.Second))
	b.TryConsume(3, now)
	stored := AppendState(nil, &b)
	keep := bytes.Clone(stored)
	for name, req := range map[string]Request{
		"create":  {Mode: ModeCreateIfAbsent, Config: bad, Ops: consume(1)},
		"replace": {Ops: []Op{{Kind: OpReplaceConfiguration, Config: bad, Inheritance: core.InheritAsIs}}},
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
	old := core.NewState(*bad, now)
	_, err := DecodeState(AppendState(nil, &old))
	if !errors.Is(err, ErrCorrupt) || !errors.Is(err, core.ErrFirstRefill) {
		t.Fatalf("DecodeState = %v, want ErrCorrupt wrapping ErrFirstRefill", err)
	}
}
