package bucketgrid_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/cas/memstore"
	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/core"
)

// outcome is what a call did, as comparable text: its result, the class of
// its error, the listener's counts and how far the fake clock moved.
func outcome(res any, err error, cl *bucketgrid.CountingListener, moved time.Duration) string {
	class := "nil"
	for _, e := range []error{bucketgrid.ErrTokens, bucketgrid.ErrExceedsCapacity, bucketgrid.ErrOverdraftTooLarge,
		core.ErrUnknownStrategy, context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, e) {
			class = e.Error()
		}
	}
	var cfgErr *core.ConfigError
	if errors.As(err, &cfgErr) {
		class = "config error"
	}
	if err != nil && class == "nil" {
		class = "other: " + err.Error()
	}
	return fmt.Sprintf("result %v, error %s, consumed %d, rejected %d, parked %v, interrupted %d, clock +%v",
		res, class, cl.Consumed(), cl.Rejected(), cl.Parked(), cl.Interrupted(), moved)
}

// consumeWithin is Consume under a deadline maxWait away: Bucket4j's
// tryConsume(n, maxWait).
func consumeWithin(ctx context.Context, b bucketgrid.Bucket, n int64, maxWait time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, maxWait)
	defer cancel()
	return b.Consume(ctx, n)
}

// TestLocalAndHandleAgree runs the edge cases of the Bucket contract on a
// Local and on a Handle and requires the same results, errors and events:
// one behaviour, whatever holds the state.
func TestLocalAndHandleAgree(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	slow := core.Greedy(2, 1, math.MaxInt64/2) // after an overdraft of 1, 3 tokens take more than int64 ns
	cases := []struct {
		name string
		bw   core.Bandwidth
		call func(ctx context.Context, b bucketgrid.Bucket) (any, error)
	}{
		{"Consume beyond capacity under a deadline", core.Greedy(10, 1, time.Second),
			func(ctx context.Context, b bucketgrid.Bucket) (any, error) {
				return nil, consumeWithin(ctx, b, 11, time.Hour)
			}},
		{"Consume beyond capacity", core.Greedy(10, 1, time.Second),
			func(ctx context.Context, b bucketgrid.Bucket) (any, error) { return nil, b.Consume(ctx, 11) }},
		{"Consume waits", core.Greedy(10, 1, time.Second),
			func(ctx context.Context, b bucketgrid.Bucket) (any, error) {
				if _, err := b.TryConsume(ctx, 10); err != nil {
					return nil, err
				}
				return nil, b.Consume(ctx, 3)
			}},
		{"Consume past the deadline", core.Greedy(10, 1, time.Second),
			func(ctx context.Context, b bucketgrid.Bucket) (any, error) {
				if _, err := b.TryConsume(ctx, 10); err != nil {
					return nil, err
				}
				return nil, consumeWithin(ctx, b, 3, 2*time.Second)
			}},
		{"Consume beyond the int64 wait", slow,
			func(ctx context.Context, b bucketgrid.Bucket) (any, error) {
				if _, err := b.ConsumeIgnoringRateLimits(ctx, 3); err != nil {
					return nil, err
				}
				return nil, b.Consume(ctx, 2)
			}},
		{"Consume beyond the int64 wait under a deadline", slow,
			func(ctx context.Context, b bucketgrid.Bucket) (any, error) {
				if _, err := b.ConsumeIgnoringRateLimits(ctx, 3); err != nil {
					return nil, err
				}
				return nil, consumeWithin(ctx, b, 2, time.Hour)
			}},
		{"Consume on a done context", core.Greedy(10, 1, time.Second),
			func(_ context.Context, b bucketgrid.Bucket) (any, error) { return nil, b.Consume(cancelled, 1) }},
		{"overdraft beyond int64", slow,
			func(ctx context.Context, b bucketgrid.Bucket) (any, error) {
				return b.ConsumeIgnoringRateLimits(ctx, math.MaxInt64)
			}},
		{"verbose probe", core.Greedy(10, 1, time.Second),
			func(ctx context.Context, b bucketgrid.Bucket) (any, error) {
				v, err := b.TryConsumeAndReturnRemainingVerbose(ctx, 4)
				d := v.Diagnostics
				return fmt.Sprint(v.Probe, d.Available, d.TimeToFull, d.State.Bands, v.Share), err
			}},
		{"verbose probe refused", core.Greedy(10, 1, time.Second),
			func(ctx context.Context, b bucketgrid.Bucket) (any, error) {
				v, err := b.TryConsumeAndReturnRemainingVerbose(ctx, 11)
				d := v.Diagnostics
				return fmt.Sprint(v.Probe, d.Available, d.TimeToFull, v.Share), err
			}},
		{"zero tokens", core.Greedy(10, 1, time.Second),
			func(ctx context.Context, b bucketgrid.Bucket) (any, error) {
				return nil, consumeWithin(ctx, b, 0, time.Hour)
			}},
		{"as much as possible, negative limit", core.Greedy(10, 1, time.Second),
			func(ctx context.Context, b bucketgrid.Bucket) (any, error) {
				return b.TryConsumeAsMuchAsPossible(ctx, -1)
			}},
		{"unknown strategy", core.Greedy(10, 1, time.Second),
			func(ctx context.Context, b bucketgrid.Bucket) (any, error) {
				cfg, _ := core.NewConfig(core.Greedy(5, 1, time.Second))
				return nil, b.ReplaceConfiguration(ctx, cfg, core.TokensInheritance(9))
			}},
		{"invalid replacement", core.Greedy(10, 1, time.Second),
			func(ctx context.Context, b bucketgrid.Bucket) (any, error) {
				return nil, b.ReplaceConfiguration(ctx, core.Config{}, core.InheritAsIs)
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			run := func(b bucketgrid.Bucket, clk *clock.Fake, cl *bucketgrid.CountingListener) string {
				t0 := clk.Now()
				res, err := c.call(ctx, b)
				tokens, aerr := b.AvailableTokens(ctx)
				if aerr != nil {
					t.Fatalf("AvailableTokens: %v", aerr)
				}
				return fmt.Sprintf("%s, %d tokens after", outcome(res, err, cl, time.Duration(clk.Now()-t0)), tokens)
			}
			cfg, err := core.NewConfig(c.bw)
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
			if got, want := run(h, hclk, hcl), run(local, lclk, lcl); got != want {
				t.Fatalf("Handle:\n\t%s\nLocal:\n\t%s", got, want)
			} else {
				t.Log(got)
			}
		})
	}
}
