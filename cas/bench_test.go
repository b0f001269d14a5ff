package cas_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/cas/memstore"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/retry"
)

// BenchmarkHotKey measures one hot key on memstore with 50 µs of injected
// latency per store operation, as a nearby network store would have, for 1,
// 8 and 64 concurrent clients, immediate retry against backoff with jitter.
// Reported: checks/s, p50 and p99 latency, store attempts per check, and the
// share of checks that gave up; with and without coalescing of concurrent
// requests.
//
//	go test -run '^$' -bench HotKey -benchtime 2000x ./cas
func BenchmarkHotKey(b *testing.B) {
	strategies := []struct {
		name string
		opts func() []cas.Option
	}{
		{"immediate/unbatched", func() []cas.Option {
			return []cas.Option{cas.WithRetry(retry.Immediate(100)), cas.WithoutBatching()}
		}},
		{"backoff/unbatched", func() []cas.Option { return []cas.Option{cas.WithRetry(retry.Default()), cas.WithoutBatching()} }},
		{"immediate/batched", func() []cas.Option { return []cas.Option{cas.WithRetry(retry.Immediate(100))} }},
		{"backoff/batched", func() []cas.Option { return []cas.Option{cas.WithRetry(retry.Default())} }},
	}
	for _, clients := range []int{1, 8, 64} {
		for _, st := range strategies {
			b.Run(fmt.Sprintf("clients=%d/%s", clients, st.name), func(b *testing.B) {
				benchHotKey(b, clients, st.opts()...)
			})
		}
	}
}

func benchHotKey(b *testing.B, clients int, opts ...cas.Option) {
	store := memstore.New(memstore.WithLatency(50 * time.Microsecond))
	exec := cas.New(store, opts...)
	cfg, _ := core.NewConfig(core.Greedy(1<<40, 1<<20, time.Second))
	h := bucketgrid.NewManager(exec).Bucket("hot", func(context.Context) (core.Config, error) { return cfg, nil })
	ctx := context.Background()
	if _, err := h.TryConsume(ctx, 1); err != nil {
		b.Fatal(err)
	}
	before := exec.Stats()
	lat := make([][]time.Duration, clients)
	var failed sync.Map
	var wg sync.WaitGroup
	b.ResetTimer()
	t0 := time.Now()
	for c := 0; c < clients; c++ {
		n := b.N / clients
		if c < b.N%clients {
			n++
		}
		lat[c] = make([]time.Duration, 0, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < n; i++ {
				s := time.Now()
				if _, err := h.TryConsume(ctx, 1); err != nil {
					failed.Store(c*b.N+i, err)
				}
				lat[c] = append(lat[c], time.Since(s))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(t0)
	b.StopTimer()
	all := slices.Concat(lat...)
	slices.Sort(all)
	st := exec.Stats()
	var gaveUp int
	failed.Range(func(any, any) bool { gaveUp++; return true })
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "checks/s")
	b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
	b.ReportMetric(float64(st.Attempts-before.Attempts)/float64(b.N), "attempts/check")
	b.ReportMetric(100*float64(gaveUp)/float64(b.N), "gave-up-%")
}
