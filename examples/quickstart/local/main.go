// Command local is the README's first quick start: a token bucket in this
// process.
package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/core"
)

func main() {
	ctx := context.Background()
	cfg, err := core.NewConfig(core.Greedy(10, 10, time.Second)) // 10 tokens, 10 more per second
	if err != nil {
		log.Fatal(err) // invalid configurations are rejected here, with a typed error
	}
	b, err := bucketgrid.NewLocal(cfg)
	if err != nil {
		log.Fatal(err)
	}
	for i := range 12 {
		p, err := b.TryConsumeAndReturnRemaining(ctx, 1)
		if err != nil {
			log.Fatal(err)
		}
		if p.Consumed {
			fmt.Println("request", i, "allowed,", p.Remaining, "left")
		} else {
			fmt.Println("request", i, "refused: retry after", p.WaitForRefill) // exact, never early
		}
	}
}
