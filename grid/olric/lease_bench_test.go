package olric

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/core"
)

// BenchmarkLeaseDemand measures what leases cost and save by demand: one
// 3-member cluster without leases and one with leases for each MinDemand
// (8 and 2), the same checks on each, TryConsume(1) on a window bucket.
// benchCallers callers, each walking every key in turn from its own
// starting point, evenly spaced, at a fixed pace
// (BENCH_LEASE_RATE/benchCallers checks/s; default rate 6,000), five on each
// member (seen=3: every member checks every key) or only the five of one
// member (seen=1), so that a member checks each key equally often either
// way: on BENCH_LEASE_KEYS keys (default 64: each member checks each about
// 3 times per Lifetime, below MinDemand 8) and on 10,000 (each checked
// about once every 5 s by a member). Reported: CPU per check of the process
// (callers and owners, the idle work of every cluster included), the same
// less the process's CPU of the second before the run (net), checks/s, and
// the share decided on leases (at most two thirds, what members do not
// own).
func BenchmarkLeaseDemand(b *testing.B) {
	timings := func(c *Config) {
		d := DefaultLocalConfig()
		c.RoutingRefresh, c.RoutingLease, c.HandoverGrace = d.RoutingRefresh, d.RoutingLease, d.HandoverGrace
	}
	few, rate := 64, 6000
	if n, err := strconv.Atoi(os.Getenv("BENCH_LEASE_KEYS")); err == nil && n > 0 {
		few = n
	}
	if n, err := strconv.Atoi(os.Getenv("BENCH_LEASE_RATE")); err == nil && n > 0 {
		rate = n
	}
	every := time.Duration(benchCallers) * time.Second / time.Duration(rate) // per caller
	clusters := []struct {
		name string
		ms   []*Member
	}{
		{"off", startCluster(b, 3, timings)},
		{"min8", startCluster(b, 3, func(c *Config) { timings(c); c.Leases.Enabled = true; c.Leases.MinDemand = 8 })},
		{"min2", startCluster(b, 3, func(c *Config) { timings(c); c.Leases.Enabled = true; c.Leases.MinDemand = 2 })},
	}
	cfg, err := core.NewConfig(core.Intervally(1<<40, 1<<40, 24*time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	req := consumeReq(&cfg, 1)
	ctx := context.Background()
	for _, keys := range []int{few, 10000} {
		for _, seen := range []int{3, 1} {
			for _, cl := range clusters {
				names := keySet(fmt.Sprintf("demand-%s-%d-%d-", cl.name, keys, seen), keys)
				b.Run(fmt.Sprintf("keys=%d/seen=%d/leases=%s", keys, seen, cl.name), func(b *testing.B) {
					callers := benchCallers / 3 * seen
					// the clusters' own work when idle (gossip, routing
					// reads), per second, subtracted from the run's
					idle0 := cpuTime()
					time.Sleep(time.Second)
					idle := cpuTime() - idle0
					var wg sync.WaitGroup
					b.ResetTimer()
					start, cpu0, leased0 := time.Now(), cpuTime(), leasedChecks(cl.ms)
					for c := range callers {
						n := b.N / callers
						if c < b.N%callers {
							n++
						}
						m := cl.ms[c%seen]
						wg.Go(func() {
							for i := range n {
								if d := time.Until(start.Add(time.Duration(i) * every)); d > 0 {
									time.Sleep(d) // paced: demand is the rate's, not the cluster's speed
								}
								if _, err := m.Execute(ctx, names[(c*keys/callers+i)%keys], req); err != nil {
									b.Error(err)
									return
								}
							}
						})
					}
					wg.Wait()
					elapsed, cpu := time.Since(start), cpuTime()-cpu0
					b.StopTimer()
					b.ReportMetric(float64(b.N)/elapsed.Seconds(), "checks/s")
					b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/1e3, "cpu-µs/check")
					net := cpu - time.Duration(float64(idle)*elapsed.Seconds())
					b.ReportMetric(float64(net.Nanoseconds())/float64(b.N)/1e3, "net-cpu-µs/check")
					b.ReportMetric(100*float64(leasedChecks(cl.ms)-leased0)/float64(max(b.N, 1)), "leased-%")
				})
			}
		}
	}
}
