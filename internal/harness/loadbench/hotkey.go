package loadbench

import (
	"fmt"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/retry"
	"github.com/bucketgrid/bucketgrid/tck"
)

// HotKey runs tck.BenchmarkHotKey on a store newStore returns, for 1 and 8
// concurrent clients, each with immediate retry and with backoff with
// jitter (the default budget and 1 s, for round trips of several
// milliseconds), as sub-benchmarks named clients=N/strategy.
func HotKey(b *testing.B, newStore func(b *testing.B) cas.Store) {
	strategies := []struct {
		name string
		s    func() retry.Strategy
	}{
		{"immediate", func() retry.Strategy { return retry.Immediate(100) }},
		{"backoff", retry.Default},
		{"backoff-1s", func() retry.Strategy { return retry.Backoff(retry.BackoffConfig{Budget: time.Second}) }},
	}
	for _, clients := range []int{1, 8} {
		for _, st := range strategies {
			b.Run(fmt.Sprintf("clients=%d/%s", clients, st.name), func(b *testing.B) {
				tck.BenchmarkHotKey(b, newStore(b), clients, cas.WithRetry(st.s()))
			})
		}
	}
}
