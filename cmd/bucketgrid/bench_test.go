package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/bucketgrid/bucketgrid/internal/loadbench"
)

// The benchmark's rules. Windows of a year and limits sized for
// -benchtime 60000x: about half the checks are admitted, so both answers are
// measured and over-admission would show.
const benchConfig = `
domain: bench
descriptors:
  - key: hot
    rate_limit: {unit: year, requests_per_unit: 30000}
  - key: user
    rate_limit: {unit: year, requests_per_unit: 3}
`

// bucketgrid's token-bucket variant: the same numbers, a bucket of the limit
// refilled over a year.
const benchConfigTB = `
domain: bench-tb
descriptors:
  - key: hot
    rate_limit: {unit: year, requests_per_unit: 30000, algorithm: token_bucket}
  - key: user
    rate_limit: {unit: year, requests_per_unit: 3, algorithm: token_bucket}
`

const (
	benchCallers = 16
	benchKeys    = 10000
	hotLimit     = 30000
	userLimit    = 3
)

// BenchmarkRLS compares bucketgrid (three instances forming one grid, and
// one alone) with
// envoyproxy/ratelimit (one instance, and three on one Redis) under the same
// gRPC load client: 16 callers, each sending to the instances in turn, on one
// hot descriptor and on 10,000 descriptors. It reports checks per second,
// the 50th and 99th percentile latency, the checks admitted beyond the limit
// (over-admitted; must be 0), and the CPU time per check of the servers
// (bucketgrid's three processes; envoyproxy/ratelimit's processes and the
// Redis server) and of the load client: on a shared machine the CPU figures
// are the steadier comparison, and the client's share bounds every
// throughput. Run it as
//
//	go test -run '^$' -bench BenchmarkRLS -benchtime 60000x .
//
// with the servers of scripts/servers.sh (REDIS_ADDR, ENVOY_RATELIMIT_BIN).
func BenchmarkRLS(b *testing.B) {
	files := map[string]string{"bench.yaml": benchConfig}
	bucketgrid := func(n int) func(b *testing.B) ([]string, []int) {
		return func(b *testing.B) ([]string, []int) {
			return grpcPids(startCluster(b, n, "-config", writeConfig(b, b.TempDir(),
				map[string]string{"bench.yaml": benchConfig, "tb.yaml": benchConfigTB}), "-headers", "none"))
		}
	}
	envoy := func(n int) func(b *testing.B) ([]string, []int) {
		return func(b *testing.B) ([]string, []int) {
			prefix := "bgbench_" + randHex(6) + "_"
			var addrs []string
			pids := []int{redisPid(b)}
			for range n {
				p := startPeerPrefix(b, files, prefix)
				addrs, pids = append(addrs, p.grpcAddr), append(pids, p.pid)
			}
			return addrs, pids
		}
	}
	targets := []struct {
		name   string
		domain string
		start  func(b *testing.B) (addrs []string, pids []int) // gRPC addresses, server processes
	}{
		{"bucketgrid-1", "bench", bucketgrid(1)},
		{"bucketgrid-3", "bench", bucketgrid(3)},
		{"bucketgrid-3-token-bucket", "bench-tb", bucketgrid(3)},
		{"envoy-ratelimit-1", "bench", envoy(1)},
		{"envoy-ratelimit-3", "bench", envoy(3)},
	}
	for _, tg := range targets {
		b.Run(tg.name, func(b *testing.B) {
			need(b, "REDIS_ADDR")
			addrs, pids := tg.start(b)
			var clients []rlspb.RateLimitServiceClient
			for _, a := range addrs {
				clients = append(clients, client(b, a))
			}
			warm(b, clients, tg.domain)
			b.Run("hot", func(b *testing.B) { load(b, clients, pids, tg.domain, "hot", 1, hotLimit) })
			b.Run("10k", func(b *testing.B) { load(b, clients, pids, tg.domain, "user", benchKeys, userLimit) })
		})
	}
}

func grpcPids(procs []*proc) (addrs []string, pids []int) {
	for _, p := range procs {
		addrs, pids = append(addrs, p.grpcAddr), append(pids, p.cmd.Process.Pid)
	}
	return addrs, pids
}

// redisPid returns the pid of the redis-server listening on REDIS_ADDR.
func redisPid(b *testing.B) int {
	addr := need(b, "REDIS_ADDR")
	if pid := loadbench.PidListening("redis-server", addr); pid != 0 {
		return pid
	}
	b.Fatalf("no redis-server process on %s", addr)
	return 0
}

// cpuTime returns the user and system CPU time the processes used so far.
func cpuTime(b *testing.B, pids []int) time.Duration {
	d, err := loadbench.ProcessCPU(pids...)
	if err != nil {
		b.Fatal(err)
	}
	return d
}

// warm opens every connection and lets every instance answer once.
func warm(b *testing.B, clients []rlspb.RateLimitServiceClient, domain string) {
	for _, c := range clients {
		for range 20 {
			if _, err := call(c, req(domain, "warm", "w")); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// load sends b.N checks of key (one of keys values, drawn in turn) from
// benchCallers callers and reports throughput, latency and over-admission.
// Values are new for every call of load, so counters never carry over.
func load(b *testing.B, clients []rlspb.RateLimitServiceClient, pids []int, domain, key string, keys, limit int) {
	run := randHex(4)
	values := make([]string, keys)
	for i := range values {
		values[i] = fmt.Sprintf("%s-%d", run, i)
	}
	admitted := make([]atomic.Int64, keys)
	var failed atomic.Int64
	var next atomic.Int64
	lat := make([][]time.Duration, benchCallers)
	window := func() int64 { return time.Now().Unix() / (365 * 86400) } // envoyproxy/ratelimit's year windows
	windowAtStart := window()
	b.ResetTimer()
	cpu0, client0 := cpuTime(b, pids), loadbench.SelfCPU()
	start := time.Now()
	var wg sync.WaitGroup
	for c := range benchCallers {
		lat[c] = make([]time.Duration, 0, b.N/benchCallers+1)
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				k := int(i) % keys
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				t0 := time.Now()
				r, err := clients[i%int64(len(clients))].ShouldRateLimit(ctx, req(domain, key, values[k]))
				lat[c] = append(lat[c], time.Since(t0))
				cancel()
				switch {
				case err != nil:
					failed.Add(1)
				case r.OverallCode == rlspb.RateLimitResponse_OK:
					admitted[k].Add(1)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu, clientCPU := cpuTime(b, pids)-cpu0, loadbench.SelfCPU()-client0
	b.StopTimer()
	if failed.Load() > 0 {
		b.Fatalf("%d of %d checks failed", failed.Load(), b.N)
	}
	var over, total int64
	for i := range admitted {
		a := admitted[i].Load()
		total += a
		over += max(0, a-int64(limit))
	}
	if over > 0 && window() != windowAtStart {
		b.Logf("a year window may have ended during the run; over-admission not meaningful")
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	pct := func(p float64) float64 {
		if len(all) == 0 {
			return 0
		}
		return float64(all[min(len(all)-1, int(p*float64(len(all))))].Microseconds())
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "checks/s")
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
	b.ReportMetric(float64(over), "over-admitted")
	b.ReportMetric(float64(total)/float64(b.N), "admitted/op")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "server-cpu-µs/op")
	b.ReportMetric(float64(clientCPU.Microseconds())/float64(b.N), "client-cpu-µs/op")
}
