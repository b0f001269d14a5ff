package clock_test

import (
	"context"
	"fmt"
	"time"

	"github.com/bucketgrid/bucketgrid/clock"
)

// A Fake makes waiting instant and exact: Sleep advances it.
func ExampleFake() {
	c := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	before := c.Now()
	if err := clock.Sleep(context.Background(), c, 1500*time.Millisecond); err != nil {
		panic(err)
	}
	fmt.Println(time.Duration(c.Now()-before), c.Wall())
	// Output: 1.5s true
}

// Func adapts any time source, here one that is a fixed offset ahead of
// Unix time, as a client with a skewed clock would be.
func ExampleFunc() {
	base := clock.NewFake(time.Unix(1000, 0))
	ahead := clock.Func(func() int64 { return base.Now() + int64(time.Second) }, true)
	fmt.Println(time.Unix(0, ahead.Now()).UTC().Format(time.TimeOnly), ahead.Wall())
	// Output: 00:16:41 true
}
