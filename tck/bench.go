package tck

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/core"
)

// BenchmarkHotKey measures bucket checks (TryConsume of 1 token) on one hot
// key of s through a cas executor built with opts, b.N checks spread over
// clients goroutines. It reports checks/s, p50 and p99 latency in µs, store
// attempts per check, and the share of checks that failed (gave up or
// errored). The bucket never runs dry: the benchmark measures the store and
// the executor, not the limit.
func BenchmarkHotKey(b *testing.B, s cas.Store, clients int, opts ...cas.Option) {
	b.Helper()
	exec := cas.New(s, opts...)
	cfg, err := core.NewConfig(core.Greedy(1<<40, 1<<20, time.Second))
	if err != nil {
		b.Fatal(err)
	}
	h := bucketgrid.NewManager(exec).Bucket("tck-hot-"+runID(), func(context.Context) (core.Config, error) { return cfg, nil })
	ctx := context.Background()
	if _, err := h.TryConsume(ctx, 1); err != nil {
		b.Fatal(err)
	}
	before := exec.Stats()
	lat := make([][]time.Duration, clients)
	var failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	b.ResetTimer()
	t0 := time.Now()
	for c := range clients {
		n := b.N / clients
		if c < b.N%clients {
			n++
		}
		lat[c] = make([]time.Duration, 0, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range n {
				began := time.Now()
				if _, err := h.TryConsume(ctx, 1); err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
				lat[c] = append(lat[c], time.Since(began))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(t0)
	b.StopTimer()
	all := slices.Concat(lat...)
	slices.Sort(all)
	st := exec.Stats()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "checks/s")
	b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
	b.ReportMetric(float64(st.Attempts-before.Attempts)/float64(b.N), "attempts/check")
	b.ReportMetric(100*float64(failed.Load())/float64(b.N), "gave-up-%")
	if err := firstErr.Load(); err != nil {
		b.Logf("first failure: %v", err)
	}
}
