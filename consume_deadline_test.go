package bucketgrid_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/cas/memstore"
	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/core"
)

// TestConsumeRefusesPastTheDeadline is the caller's side of a blocking
// consumption, as x/time/rate's WaitN: tokens that would come after the
// context's deadline are refused at once, with an error wrapping
// context.DeadlineExceeded, and nothing is consumed, on a Local and on a
// Handle alike. The buckets wait on fake clocks, whose waits return at once:
// a Consume that reserved and waited would succeed and move its clock.
func TestConsumeRefusesPastTheDeadline(t *testing.T) {
	cfg, err := core.NewConfig(core.Greedy(10, 10, time.Hour).WithInitialTokens(0)) // 6 minutes a token
	if err != nil {
		t.Fatal(err)
	}
	lclk, lcl := clock.NewFake(time.Unix(1_800_000_000, 0)), new(bucketgrid.CountingListener)
	local, err := bucketgrid.NewLocal(cfg, bucketgrid.WithClock(lclk), bucketgrid.WithListener(lcl))
	if err != nil {
		t.Fatal(err)
	}
	hclk, hcl := clock.NewFake(time.Unix(1_800_000_000, 0)), new(bucketgrid.CountingListener)
	m := bucketgrid.NewManager(cas.New(memstore.New(memstore.WithClock(hclk)), cas.WithClock(hclk)),
		bucketgrid.WithClock(hclk), bucketgrid.WithListener(hcl))
	h := m.Bucket("k", func(context.Context) (core.Config, error) { return cfg, nil })
	for _, b := range []struct {
		name string
		b    bucketgrid.Bucket
		clk  *clock.Fake
		cl   *bucketgrid.CountingListener
	}{{"Local", local, lclk, lcl}, {"Handle", h, hclk, hcl}} {
		t.Run(b.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			start := b.clk.Now()
			err := b.b.Consume(ctx, 1) // 6 minutes away
			if !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
				t.Fatalf("Consume of a token 6 minutes away under a 1-minute deadline = %v (context %v); want DeadlineExceeded at once", err, ctx.Err())
			}
			if moved := time.Duration(b.clk.Now() - start); moved != 0 || b.cl.Parked() != 0 || b.cl.Consumed() != 0 || b.cl.Rejected() != 1 {
				t.Fatalf("clock +%v, parked %v, consumed %d, rejected %d; want no wait, one rejection", moved, b.cl.Parked(), b.cl.Consumed(), b.cl.Rejected())
			}
			b.clk.Advance(6 * time.Minute)
			if n, err := b.b.AvailableTokens(context.Background()); n != 1 || err != nil {
				t.Fatalf("6 minutes on: %d tokens (%v), want the 1 a refused Consume left alone", n, err)
			}
			// within the deadline, it waits as before
			long, cancel := context.WithTimeout(context.Background(), time.Hour)
			defer cancel()
			if err := b.b.Consume(long, 2); err != nil || time.Duration(b.clk.Now()-start) != 12*time.Minute {
				t.Fatalf("Consume within the deadline = %v after +%v, want nil after +12m", err, time.Duration(b.clk.Now()-start))
			}
		})
	}
}
