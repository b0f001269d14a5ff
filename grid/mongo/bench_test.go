package mongo_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/retry"
)

// BenchmarkHotKey measures bucket checks (TryConsume of 1 token) on one hot
// key through the cas executor, for 1 and 8 concurrent clients, immediate
// retry against backoff with jitter (default and 1 s budgets). Through
// FerretDB the client has one connection (see TestTCK). Reported: checks/s,
// p50 and p99 latency, attempts per check, and the share of checks that gave
// up.
//
//	scripts/servers.sh start && . .servers/env
//	go test -run '^$' -bench HotKey -benchtime 400x ./grid/mongo
func BenchmarkHotKey(b *testing.B) {
	uri := mongoURI(b)
	strategies := []struct {
		name string
		s    func() retry.Strategy
	}{
		{"immediate", func() retry.Strategy { return retry.Immediate(100) }},
		{"backoff", retry.Default},
		// The default budget (100 ms) is sized for sub-millisecond stores; at
		// several milliseconds per round trip a hot key needs more.
		{"backoff-1s", func() retry.Strategy { return retry.Backoff(retry.BackoffConfig{Budget: time.Second}) }},
	}
	for _, clients := range []int{1, 8} {
		for _, st := range strategies {
			b.Run(fmt.Sprintf("clients=%d/%s", clients, st.name), func(b *testing.B) {
				benchHotKey(b, newStoreURI(b, uri, 1), clients, st.s())
			})
		}
	}
}

func benchHotKey(b *testing.B, store cas.Store, clients int, strategy retry.Strategy) {
	exec := cas.New(store, cas.WithRetry(strategy))
	cfg, err := core.NewConfig(core.Greedy(1<<40, 1<<20, time.Second))
	if err != nil {
		b.Fatal(err)
	}
	h := bucketgrid.NewManager(exec).Bucket("hot", func(context.Context) (core.Config, error) { return cfg, nil })
	ctx := context.Background()
	if _, err := h.TryConsume(ctx, 1); err != nil {
		b.Fatal(err)
	}
	before := exec.Stats()
	lat := make([][]time.Duration, clients)
	var gaveUp atomic.Int64
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
				s := time.Now()
				if _, err := h.TryConsume(ctx, 1); err != nil {
					gaveUp.Add(1)
					firstErr.CompareAndSwap(nil, err)
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
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "checks/s")
	b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
	b.ReportMetric(float64(st.Attempts-before.Attempts)/float64(b.N), "attempts/check")
	b.ReportMetric(100*float64(gaveUp.Load())/float64(b.N), "gave-up-%")
	if err := firstErr.Load(); err != nil {
		b.Logf("first failure: %v", err)
	}
}
