package bucketgrid_test

import (
	"context"
	"fmt"
	"time"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/core"
)

// A bucket of 50 calls refilled greedily at 10 per second, as in Bucket4j's
// REST API example: the client may average 10 calls per second and burst up
// to 50.
func ExampleNewLocal() {
	cfg, err := core.NewConfig(core.Greedy(50, 10, time.Second))
	if err != nil {
		panic(err)
	}
	bucket, err := bucketgrid.NewLocal(cfg)
	if err != nil {
		panic(err)
	}
	ok, _ := bucket.TryConsume(context.Background(), 1)
	fmt.Println("served:", ok)
	// Output: served: true
}

// TryConsumeAndReturnRemaining gives what a 429 response needs: the tokens
// left and how long the client must wait.
func ExampleLocal_TryConsumeAndReturnRemaining() {
	cfg, _ := core.NewConfig(core.Intervally(10, 10, time.Minute))
	clk := clock.NewFake(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	bucket, _ := bucketgrid.NewLocal(cfg, bucketgrid.WithClock(clk))
	ctx := context.Background()

	clk.Advance(15 * time.Second)
	for range 10 {
		bucket.TryConsume(ctx, 1)
	}
	probe, _ := bucket.TryConsumeAndReturnRemaining(ctx, 1)
	fmt.Println("consumed:", probe.Consumed)
	fmt.Println("remaining:", probe.Remaining)
	fmt.Println("retry after:", probe.WaitForRefill)
	// Output:
	// consumed: false
	// remaining: 0
	// retry after: 45s
}

// Consume waits for refill; with a clock.Fake the wait advances the clock at
// once, by exactly the time the tokens needed.
func ExampleLocal_Consume() {
	cfg, _ := core.NewConfig(core.Greedy(100, 100, time.Minute).WithInitialTokens(0))
	clk := clock.NewFake(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	bucket, _ := bucketgrid.NewLocal(cfg, bucketgrid.WithClock(clk))
	start := clk.Now()

	if err := bucket.Consume(context.Background(), 5); err != nil {
		panic(err)
	}
	left, _ := bucket.AvailableTokens(context.Background())
	fmt.Println("waited:", time.Duration(clk.Now()-start))
	fmt.Println("left:", left)
	// Output:
	// waited: 3s
	// left: 0
}

// ConsumeIgnoringRateLimits overdraws the bucket and says how long the debt
// takes to repay: Bucket4j's 121000 tokens on 1000 per minute.
func ExampleLocal_ConsumeIgnoringRateLimits() {
	cfg, _ := core.NewConfig(core.Greedy(1000, 1000, time.Minute))
	bucket, _ := bucketgrid.NewLocal(cfg, bucketgrid.WithClock(clock.NewFake(time.Unix(0, 0))))
	wait, _ := bucket.ConsumeIgnoringRateLimits(context.Background(), 121000)
	fmt.Println(wait)
	// Output: 2h0m0s
}
