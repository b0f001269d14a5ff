package cas_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/core"

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

// BenchmarkExecute measures the executor's own cost per check: TryConsume
// of 1 token on 1,000 keys in turn, over memstore without latency, so that
// nothing but the executor, wire.Process and the Manager's handle is
// measured, with memory and pipelining on and off.
//
//	go test -run '^$' -bench Execute -benchmem ./cas
func BenchmarkExecute(b *testing.B) {
	for _, c := range []struct {
		name string
		opts []cas.Option
	}{
		{"defaults", nil},
		{"no-pipelining", []cas.Option{cas.WithoutPipelining()}},
		{"no-memory", []cas.Option{cas.WithoutMemory()}},
		{"neither", []cas.Option{cas.WithoutMemory(), cas.WithoutPipelining()}},
	} {
		b.Run(c.name, func(b *testing.B) {
			cfg, _ := core.NewConfig(core.Greedy(1<<40, 1, time.Hour))
			m := bucketgrid.NewManager(cas.New(memstore.New(), c.opts...))
			hs := make([]*bucketgrid.Handle, 1000)
			for i := range hs {
				hs[i] = m.Bucket(strconv.Itoa(i), func(context.Context) (core.Config, error) { return cfg, nil })
				if _, err := hs[i].TryConsume(context.Background(), 1); err != nil {
					b.Fatal(err)
				}
			}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if _, err := hs[i%len(hs)].TryConsume(ctx, 1); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
