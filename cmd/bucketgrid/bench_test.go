package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/bucketgrid/bucketgrid/internal/harness/loadbench"
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

// BenchmarkRLS compares bucketgrid (three instances forming one grid,
// with and without -grid-leases or -degrade, one alone, and one on Redis
// with and without -degrade) with
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
// BUCKETGRID_BIN runs a bucketgrid binary built beforehand instead of
// building this one (to compare two builds in one session), and
// BENCH_PROFILE_DIR=dir saves a CPU profile of every bucketgrid instance
// during each run (BENCH_PROFILE_SECONDS long, default 5) into dir, and
// BENCH_PERF=1 counts the servers' system calls and context switches per
// check with perf stat (Linux perf with tracepoint access).
func BenchmarkRLS(b *testing.B) {
	files := map[string]string{"bench.yaml": benchConfig}
	bucketgrid := func(n int, extra ...string) func(b *testing.B) servers {
		return func(b *testing.B) servers {
			args := []string{"-config", writeConfig(b, b.TempDir(),
				map[string]string{"bench.yaml": benchConfig, "tb.yaml": benchConfigTB}), "-headers", "none"}
			args = append(args, extra...)
			if os.Getenv("BENCH_PROFILE_DIR") != "" {
				args = append(args, "-debug-addr", "127.0.0.1:0")
			}
			var s servers
			for _, p := range startCluster(b, n, args...) {
				s.addrs, s.pids = append(s.addrs, p.grpcAddr), append(s.pids, p.Pid())
				if p.debugAddr != "" {
					s.debug = append(s.debug, p.debugAddr)
				}
			}
			return s
		}
	}
	// one instance on the Redis of scripts/servers.sh, its CPU counted with
	// the server's, to compare with degrade on (-degrade -degrade-count):
	// what degrade costs while the backend answers
	onRedis := func(extra ...string) func(b *testing.B) servers {
		return func(b *testing.B) servers {
			args := []string{"-config", writeConfig(b, b.TempDir(),
				map[string]string{"bench.yaml": benchConfig, "tb.yaml": benchConfigTB}), "-headers", "none",
				"-backend", "redis://" + need(b, "REDIS_ADDR") + "?prefix=bgbench_" + randHex(6) + ":"}
			p := startProc(b, gridPort(b), nil, append(args, extra...)...)
			return servers{addrs: []string{p.grpcAddr}, pids: []int{p.Pid(), redisPid(b)}}
		}
	}
	envoy := func(n int) func(b *testing.B) servers {
		return func(b *testing.B) servers {
			prefix := "bgbench_" + randHex(6) + "_"
			s := servers{pids: []int{redisPid(b)}}
			for range n {
				p := startPeerPrefix(b, files, prefix)
				s.addrs, s.pids = append(s.addrs, p.grpcAddr), append(s.pids, p.pid)
			}
			return s
		}
	}
	targets := []struct {
		name   string
		domain string
		start  func(b *testing.B) servers
	}{
		{"bucketgrid-1", "bench", bucketgrid(1)},
		{"bucketgrid-3", "bench", bucketgrid(3)},
		{"bucketgrid-3-token-bucket", "bench-tb", bucketgrid(3)},
		{"bucketgrid-3-leases", "bench", bucketgrid(3, "-grid-leases")},
		{"bucketgrid-3-token-bucket-leases", "bench-tb", bucketgrid(3, "-grid-leases")},
		{"bucketgrid-3-degrade", "bench", bucketgrid(3, "-degrade")},
		{"bucketgrid-1-redis", "bench", onRedis()},
		{"bucketgrid-1-redis-degrade", "bench", onRedis("-degrade", "-degrade-count")},
		{"bucketgrid-1-redis-token-bucket", "bench-tb", onRedis()},
		{"bucketgrid-1-redis-token-bucket-degrade", "bench-tb", onRedis("-degrade", "-degrade-count")},
		{"envoy-ratelimit-1", "bench", envoy(1)},
		{"envoy-ratelimit-3", "bench", envoy(3)},
	}
	for _, tg := range targets {
		b.Run(tg.name, func(b *testing.B) {
			need(b, "REDIS_ADDR")
			srv := tg.start(b)
			lc := loadClients(b, srv.addrs)
			warm(b, lc.grpc, tg.domain)
			b.Run("hot", func(b *testing.B) { load(b, lc, srv, tg.domain, "hot", 1, hotLimit) })
			b.Run("10k", func(b *testing.B) { load(b, lc, srv, tg.domain, "user", benchKeys, userLimit) })
		})
	}
}

// clients are the load client's connections, one to each instance:
// grpc-go's, and the lean client's unless BENCH_CLIENT=grpc-go.
type clients struct {
	grpc []rlspb.RateLimitServiceClient
	h2   []*h2client
}

func loadClients(b *testing.B, addrs []string) clients {
	var lc clients
	for _, a := range addrs {
		lc.grpc = append(lc.grpc, client(b, a))
		if os.Getenv("BENCH_CLIENT") != "grpc-go" {
			c, err := dialH2(a)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { c.Close() })
			lc.h2 = append(lc.h2, c)
		}
	}
	return lc
}

// servers are the processes of one target: the gRPC addresses the load
// goes to, the processes whose CPU time is counted (Redis included), and
// the /debug/pprof addresses of those that serve one.
type servers struct {
	addrs []string
	pids  []int
	debug []string
}

// profile saves a CPU profile of every server with a debug address into
// $BENCH_PROFILE_DIR, if set, while the benchmark runs, and their
// allocation profiles before and after (compare with go tool pprof -base);
// wait for it with the returned function.
func (s servers) profile(b *testing.B) (wait func()) {
	dir := os.Getenv("BENCH_PROFILE_DIR")
	if dir == "" || len(s.debug) == 0 {
		return func() {}
	}
	secs := cmp.Or(os.Getenv("BENCH_PROFILE_SECONDS"), "5")
	name := strings.NewReplacer("/", "_", "=", "_").Replace(b.Name())
	save := func(addr, path, file string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			b.Errorf("profile of %s: %v", addr, err)
			return
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, file), data, 0o644)
		}
		if err != nil {
			b.Errorf("profile of %s: %v", addr, err)
		}
	}
	for i, addr := range s.debug {
		save(addr, "/debug/pprof/allocs", fmt.Sprintf("%s-%d.allocs-before", name, i))
	}
	var wg sync.WaitGroup
	for i, addr := range s.debug {
		wg.Go(func() { save(addr, "/debug/pprof/profile?seconds="+secs, fmt.Sprintf("%s-%d.pprof", name, i)) })
	}
	return func() {
		wg.Wait()
		for i, addr := range s.debug {
			save(addr, "/debug/pprof/allocs", fmt.Sprintf("%s-%d.allocs", name, i))
		}
	}
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

// perfEvents are what BENCH_PERF=1 counts, by metric name.
var perfEvents = map[string]string{
	"syscalls":  "raw_syscalls:sys_enter",
	"reads":     "syscalls:sys_enter_read",
	"writes":    "syscalls:sys_enter_write",
	"futexes":   "syscalls:sys_enter_futex",
	"epolls":    "syscalls:sys_enter_epoll_pwait",
	"ctxswitch": "context-switches",
}

// countEvents counts perfEvents in the processes pids with perf stat when
// BENCH_PERF=1, until the returned function is called, which returns the
// counts.
func countEvents(b *testing.B, pids []int) func() map[string]int64 {
	if os.Getenv("BENCH_PERF") != "1" {
		return func() map[string]int64 { return nil }
	}
	var list []string
	for _, p := range pids {
		list = append(list, strconv.Itoa(p))
	}
	args := []string{"stat", "-x", ",", "-p", strings.Join(list, ",")}
	for _, ev := range perfEvents {
		args = append(args, "-e", ev)
	}
	cmd := exec.Command("perf", args...)
	var out strings.Builder
	cmd.Stderr = &out
	if err := cmd.Start(); err != nil {
		b.Fatalf("perf: %v", err)
	}
	time.Sleep(100 * time.Millisecond) // perf attaches
	return func() map[string]int64 {
		cmd.Process.Signal(os.Interrupt)
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			// perf, interrupted while it attached, can miss the signal
			cmd.Process.Kill()
			<-exited
		}
		counts := map[string]int64{}
		for _, line := range strings.Split(out.String(), "\n") {
			f := strings.Split(line, ",")
			if len(f) < 3 {
				continue
			}
			n, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				continue
			}
			for name, ev := range perfEvents {
				if f[2] == ev {
					counts[name] = n
				}
			}
		}
		if len(counts) == 0 {
			// a run too short for perf to attach (the first, of one check)
			b.Logf("perf stat counted nothing:\n%s", out.String())
		}
		return counts
	}
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
func load(b *testing.B, lc clients, srv servers, domain, key string, keys, limit int) {
	pids := srv.pids
	run := randHex(4)
	reqs := make([]*rlspb.RateLimitRequest, keys)
	msgs := make([][]byte, keys)
	for i := range reqs {
		reqs[i] = req(domain, key, fmt.Sprintf("%s-%d", run, i))
		msgs[i] = h2message(reqs[i])
	}
	// call sends the i-th check, of request k: through the lean client
	// with its fixed timeout, or through grpc-go with a deadline of 10 s
	// of its own
	runCtx, cancelRun := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancelRun()
	call := func(i int64, k int) (*rlspb.RateLimitResponse, error) {
		if lc.h2 != nil {
			return lc.h2[i%int64(len(lc.h2))].ShouldRateLimit(runCtx, msgs[k])
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return lc.grpc[i%int64(len(lc.grpc))].ShouldRateLimit(ctx, reqs[k])
	}
	admitted := make([]atomic.Int64, keys)
	var failed atomic.Int64
	var firstErr error // written by the caller that counts the first failure
	var next atomic.Int64
	lat := make([][]time.Duration, benchCallers)
	window := func() int64 { return time.Now().Unix() / (365 * 86400) } // envoyproxy/ratelimit's year windows
	windowAtStart := window()
	b.ResetTimer()
	profiled := srv.profile(b)
	counted := countEvents(b, pids)
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
				t0 := time.Now()
				r, err := call(i, k)
				lat[c] = append(lat[c], time.Since(t0))
				switch {
				case err != nil:
					if failed.Add(1) == 1 {
						firstErr = err
					}
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
	for name, n := range counted() {
		b.ReportMetric(float64(n)/float64(b.N), name+"/op")
	}
	profiled()
	if failed.Load() > 0 {
		b.Fatalf("%d of %d checks failed; the first: %v", failed.Load(), b.N, firstErr)
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
