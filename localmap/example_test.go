package localmap_test

import (
	"context"
	"fmt"
	"time"

	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/localmap"
)

// A per-client limiter, as a Spring Boot service builds one with a Caffeine
// cache: each client key gets its own bucket from its plan, at most 100 000
// buckets are kept, and those idle for 10 minutes are dropped.
func Example() {
	plans := map[string]int64{"partner": 1000}
	limiter := localmap.New(func(client string) (core.Config, error) {
		perMinute, ok := plans[client]
		if !ok {
			perMinute = 10 // the free plan
		}
		return core.NewConfig(core.Intervally(perMinute, perMinute, time.Minute))
	}, localmap.WithMaxEntries(100_000), localmap.WithIdleTimeout(10*time.Minute))

	ctx := context.Background()
	served := map[string]int{}
	for range 20 {
		for _, client := range []string{"10.0.0.1", "partner"} {
			if ok, _ := limiter.TryConsume(ctx, client, 1); ok {
				served[client]++
			}
		}
	}
	fmt.Println("free plan served:", served["10.0.0.1"])
	fmt.Println("partner served:", served["partner"])
	// Output:
	// free plan served: 10
	// partner served: 20
}
