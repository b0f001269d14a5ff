package presence_test

import (
	"context"
	"fmt"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/cas/memstore"
	"github.com/bucketgrid/bucketgrid/cas/presence"
)

// Two instances on one store count each other; a Manager's degraded mode
// divides each limit by the count while the store is out.
func ExampleCounter() {
	store := memstore.New() // in production: the grid/redis, grid/mongo or grid/couchbase store every instance shares
	a, _ := presence.New(store, presence.Config{})
	b, _ := presence.New(store, presence.Config{})
	ctx := context.Background()
	// a service runs go a.Run(ctx) instead, which refreshes every
	// Config.Refresh and withdraws the record when ctx ends
	for _, c := range []*presence.Counter{a, b, a} {
		if err := c.Refresh(ctx); err != nil {
			fmt.Println(err)
		}
	}
	fmt.Println(a.LiveInstances(), b.LiveInstances())

	m := bucketgrid.NewManager(cas.New(store), bucketgrid.WithDegrade(bucketgrid.Degrade{Instances: a.LiveInstances}))
	_ = m
	// Output: 2 2
}
