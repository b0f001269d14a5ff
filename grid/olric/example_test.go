package olric_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/grid/olric"
)

// Each process of the application starts a member (the first with no
// peers, the others with Peers set to a running member's gossip address)
// and limits through a Manager over it; the bucket lives on its owner.
func Example() {
	cfg := olric.DefaultLocalConfig()
	cfg.BindPort = 7320 // owner channel on 7321, gossip on 7322
	cfg.LeaveTimeout = 100 * time.Millisecond
	ctx := context.Background()
	member, err := olric.Start(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer member.Shutdown(ctx)

	limits := bucketgrid.NewManager(member)
	bucket := limits.Bucket("client-42", func(context.Context) (core.Config, error) {
		return core.NewConfig(core.Intervally(10, 10, time.Minute))
	})
	for range 3 {
		if _, err := bucket.TryConsume(ctx, 4); err != nil {
			log.Fatal(err)
		}
	}
	left, err := bucket.AvailableTokens(ctx)
	fmt.Println(left, err)
	// Output: 2 <nil>
}
