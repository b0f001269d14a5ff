package cas_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/cas/memstore"
	"github.com/bucketgrid/bucketgrid/retry"
	"github.com/bucketgrid/bucketgrid/tck"
)

// BenchmarkHotKey measures one hot key on memstore with 50 µs of injected
// latency per store operation, as a nearby network store would have, for 1,
// 8 and 64 concurrent clients: immediate retry against backoff with jitter,
// with and without coalescing of concurrent requests.
//
//	go test -run '^$' -bench HotKey -benchtime 2000x ./cas
func BenchmarkHotKey(b *testing.B) {
	configs := []struct {
		name string
		opts []cas.Option
	}{
		{"immediate/unbatched", []cas.Option{cas.WithRetry(retry.Immediate(100)), cas.WithoutBatching()}},
		{"backoff/unbatched", []cas.Option{cas.WithRetry(retry.Default()), cas.WithoutBatching()}},
		{"immediate/batched", []cas.Option{cas.WithRetry(retry.Immediate(100))}},
		{"backoff/batched", []cas.Option{cas.WithRetry(retry.Default())}},
	}
	for _, clients := range []int{1, 8, 64} {
		for _, c := range configs {
			b.Run(fmt.Sprintf("clients=%d/%s", clients, c.name), func(b *testing.B) {
				tck.BenchmarkHotKey(b, memstore.New(memstore.WithLatency(50*time.Microsecond)), clients, c.opts...)
			})
		}
	}
}
