package olric

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func BenchmarkZZOlricLocal(b *testing.B) {
	ms := startCluster(b, 3, nil)
	ctx := context.Background()
	rt, _ := ms[0].client.RoutingTable(ctx)
	multi := 0
	for _, r := range rt {
		if len(r.PrimaryOwners) > 1 {
			multi++
		}
	}
	b.Logf("partitions with previous owners: %d", multi)
	for _, keys := range []int{1, 10000} {
	for mode := range 3 {
		b.Run(fmt.Sprint(keys, "-", mode), func(b *testing.B) {
			// only keys owned by ms[0]
			var own []string
			for i := 0; len(own) < keys; i++ {
				k := fmt.Sprint("x", i)
				if ms[0].Owner(k) == ms[0].name {
					own = append(own, k)
				}
			}
			var next atomic.Int64
			lat := make([][]time.Duration, 16)
			var wg sync.WaitGroup
			start := time.Now()
			for c := range 16 {
				wg.Go(func() {
					for {
						i := next.Add(1) - 1
						if i >= int64(b.N) {
							return
						}
						k := own[int(i)%keys]
						t0 := time.Now()
						if mode == 0 || mode == 1 {
							ms[0].dm.Get(ctx, k)
						}
						if mode == 0 || mode == 2 {
							ms[0].dm.Put(ctx, k, []byte("0123456789012345678901234567890123456789"))
						}
						lat[c] = append(lat[c], time.Since(t0))
					}
				})
			}
			wg.Wait()
			el := time.Since(start)
			all := slices.Concat(lat...)
			slices.Sort(all)
			b.ReportMetric(float64(b.N)/el.Seconds(), "ops/s")
			b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
			b.ReportMetric(float64(all[len(all)-1].Microseconds()), "max-µs")
		})
	}
	}
}
