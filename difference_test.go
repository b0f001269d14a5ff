package bucketgrid

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/core"
)

// The differences from Bucket4j that live in this package, as listed in the
// core package doc ("Differences from Bucket4j"); the others are pinned by
// core's TestDifference tests.

func TestDifferenceCancelledWaitGivesTokensBack(t *testing.T) {
	// 4 tokens, Consume(6) reserves 6 (-2) and waits 200 ms; cancelled
	// during the wait it gives the 6 back. Bucket4j's blocking bucket keeps
	// an interrupted thread's reservation: -2.
	cfg, _ := core.NewConfig(core.Greedy(10, 10, time.Second).WithInitialTokens(4))
	clk := blockingClock{clock.NewFake(t0), make(chan time.Duration)}
	l, err := NewLocal(cfg, WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		done <- l.Consume(ctx, 6)
	}()
	<-clk.sleeping
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Consume = %v, want context.Canceled", err)
	}
	if got := available(t, l); got != 4 {
		t.Fatalf("after the cancelled wait %d tokens, want 4 (Bucket4j -2)", got)
	}
}

func TestDifferenceDefaultClock(t *testing.T) {
	// Bucket4j's default clock is System.currentTimeMillis, a wall clock, so
	// aligned refill works by default there; the default here is monotonic
	// nanoseconds, and aligned styles need a wall clock such as clock.WallMillis.
	cfg, err := core.NewConfig(core.IntervallyAligned(10, 10, time.Hour, t0))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewLocal(cfg); !errors.Is(err, core.ErrNeedsWallClock) {
		t.Fatalf("NewLocal(aligned) with the default clock = %v, want ErrNeedsWallClock", err)
	}
	if _, err := NewLocal(cfg, WithClock(clock.WallMillis())); err != nil {
		t.Fatalf("NewLocal(aligned) with clock.WallMillis = %v", err)
	}
	if now := clock.WallMillis().Now(); now%int64(time.Millisecond) != 0 {
		t.Fatalf("clock.WallMillis reads %d, not whole milliseconds", now)
	}
}
