package wire

import (
	"github.com/bucketgrid/bucketgrid/core"
	"math"
	"strings"
	"testing"
	"time"
)

// The differences from Bucket4j (see package core) that show in requests.

const sec = int64(time.Second)

func TestDifferenceReserveNegativeMaxWait(t *testing.T) {
	// Bucket4j throws for maxWaitTimeNanos ≤ 0; zero means "only now"
	// (core's TestDifferenceReserveMaxWaitZero), a negative wait is invalid
	_, _, resp := Process(nil, Request{Mode: ModeCreateIfAbsent, Config: procConfig(10),
		Ops: []Op{{Kind: OpReserve, Tokens: 1, MaxWait: -1}}}, 0)
	if resp.Status != StatusInvalidRequest || !strings.Contains(resp.Message, errNegativeMaxWait.Error()) {
		t.Fatalf("negative MaxWait: %v %q, want an invalid request", resp.Status, resp.Message)
	}
}

func TestDifferenceVerboseDiagnostics(t *testing.T) {
	// one snapshot after all the operations of a request; Bucket4j's
	// VerboseResult belongs to one operation
	_, _, resp := Process(nil, Request{Mode: ModeCreateIfAbsent, Config: procConfig(10), Verbose: true, Ops: []Op{
		{Kind: OpTryConsume, Tokens: 4},
		{Kind: OpConsumeIgnoringRateLimits, Tokens: 9},
	}}, 0)
	d := resp.Diagnostics
	if resp.Status != StatusOK || d == nil {
		t.Fatalf("status %v, diagnostics %v", resp.Status, d)
	}
	// 10 − 4 − 9 = −3, raw as in Bucket4j's getAvailableTokensPerEachBandwidth;
	// full after 13 tokens at 10 per minute = 78 s
	if len(d.Available) != 1 || d.Available[0] != -3 || d.TimeToFull != time.Duration(78*sec) {
		t.Fatalf("diagnostics %+v, want -3 tokens and 78 s to full, after both operations", d)
	}
}

func TestDifferenceExpiryTTL(t *testing.T) {
	// 3 per second, one token short: full after ceil(1e9/3) = 333 333 334 ns,
	// plus a 1 s margin. Bucket4j: 333 333 333/1e6 = 333 ms + 1000 ms.
	cfg := &core.Config{Bandwidths: []core.Bandwidth{core.Greedy(10, 3, time.Second)}}
	_, _, resp := Process(nil, Request{Mode: ModeCreateIfAbsent, Config: cfg,
		Expiry: Expiry{Kind: ExpireAfterRefill, Margin: sec}, Ops: consume(1)}, 0)
	if resp.TTL != 1_333_333_334 {
		t.Fatalf("TTL %d, want 1333333334 ns (Bucket4j 1333 ms)", resp.TTL)
	}
	// never full within int64 nanoseconds: no TTL (Bucket4j: about 292 years)
	// (2^62 tokens short at one per hour)
	slow := &core.Config{Bandwidths: []core.Bandwidth{core.Greedy(math.MaxInt64, 1, time.Hour)}}
	_, _, resp = Process(nil, Request{Mode: ModeCreateIfAbsent, Config: slow,
		Expiry: Expiry{Kind: ExpireAfterRefill, Margin: sec}, Ops: consume(1 << 62)}, 0)
	if resp.TTL != 0 {
		t.Fatalf("TTL of a bucket that never refills to full = %d, want 0 (none)", resp.TTL)
	}
}
