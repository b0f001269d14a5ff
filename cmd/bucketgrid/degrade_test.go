package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/bucketgrid/bucketgrid/internal/harness/child"
)

// outageConfig is a token bucket of 100 a second: what an instance admits
// over a window is bounded by its capacity plus its refill.
const outageConfig = `
domain: outage
descriptors:
  - key: client
    rate_limit: {unit: second, requests_per_unit: 100, algorithm: token_bucket}
`

// redisServer is a redis-server of a test's own, which it may kill and
// start again on the same port.
type redisServer struct {
	bin, dir string
	port     int
	proc     *child.Process
}

func startRedis(t testing.TB) *redisServer {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("redis-server is not installed (scripts/servers.sh installs it)")
		}
		t.Skip("redis-server is not installed")
	}
	r := &redisServer{bin: bin, dir: t.TempDir(), port: freePorts(t, 1)[0]}
	r.start(t)
	return r
}

func (r *redisServer) addr() string { return fmt.Sprintf("127.0.0.1:%d", r.port) }

// start runs the server and waits until it accepts connections.
func (r *redisServer) start(t testing.TB) {
	t.Helper()
	r.proc = child.Start(t, exec.Command(r.bin, "--port", strconv.Itoa(r.port), "--bind", "127.0.0.1", "--save", "",
		"--appendonly", "no", "--dir", r.dir))
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.Dial("tcp", r.addr())
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server not accepting on %s after 30 s", r.addr())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// kill ends the server at once, as a crash would.
func (r *redisServer) kill() { r.proc.Kill() }

// metricValue returns the value of an unlabelled metric on the instance's
// /metrics, 0 when absent.
func metricValue(t testing.TB, httpAddr, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}

// outcome is what the load saw in one phase of an outage.
type outcome struct {
	ok, over, failed int64
	latencies        []time.Duration
}

// loadRecorder sends requests from a few goroutines until stopped and
// files each under the phase that was current when it started.
type loadRecorder struct {
	mu     sync.Mutex
	phase  atomic.Int32
	phases []outcome
	stop   atomic.Bool
	wg     sync.WaitGroup
}

func startLoad(clients []rlspb.RateLimitServiceClient, value string, phases, workers int) *loadRecorder {
	l := &loadRecorder{phases: make([]outcome, phases)}
	for w := range workers {
		l.wg.Go(func() {
			for i := w; !l.stop.Load(); i++ {
				p := l.phase.Load()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				start := time.Now()
				r, err := clients[i%len(clients)].ShouldRateLimit(ctx, req("outage", "client", value))
				d := time.Since(start)
				cancel()
				l.mu.Lock()
				o := &l.phases[p]
				switch {
				case err != nil:
					o.failed++
				case r.OverallCode == rlspb.RateLimitResponse_OK:
					o.ok++
				default:
					o.over++
				}
				o.latencies = append(o.latencies, d)
				l.mu.Unlock()
				time.Sleep(time.Millisecond) // about 1,000 requests a second per worker at most
			}
		})
	}
	return l
}

func (l *loadRecorder) finish() []outcome {
	l.stop.Store(true)
	l.wg.Wait()
	return l.phases
}

// percentile returns the p-th percentile of ds (sorted in place).
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[min(int(float64(len(ds))*p), len(ds)-1)]
}

// Phases of a Redis outage.
const (
	phaseHealthy = iota
	phaseFailing // Redis killed, breaker not yet open
	phaseOpen    // breaker open
	phaseBack    // Redis back
	numPhases
)

// redisOutageResult is one run of redisOutage.
type redisOutageResult struct {
	phases   []outcome
	outage   time.Duration // Redis down
	resumed  time.Duration // from Redis accepting again to the last local decision; -1 without degrade
	degraded float64
}

// redisOutage runs the service on a Redis of its own under load, kills
// Redis, waits (until the breaker opens, with degrade, and then 2 s), starts
// it again and waits until the service answers from it again.
func redisOutage(t testing.TB, degrade bool) redisOutageResult {
	t.Helper()
	rs := startRedis(t)
	dir := writeConfig(t, t.TempDir(), map[string]string{"outage.yaml": outageConfig})
	args := []string{"-config", dir, "-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0",
		"-backend", "redis://" + rs.addr() + "?prefix=outage:", "-timeout", "1s"}
	args = append(args, "-degrade="+strconv.FormatBool(degrade), "-degrade-instances", "1")
	in := startInstance(t, args...)
	l := startLoad([]rlspb.RateLimitServiceClient{client(t, in.grpcAddr)}, "c"+randHex(4), numPhases, 4)
	defer l.finish()
	time.Sleep(500 * time.Millisecond) // a healthy baseline: a measurement, not a synchronisation
	rs.kill()
	killed := time.Now()
	l.phase.Store(phaseFailing)
	if degrade {
		deadline := time.Now().Add(30 * time.Second)
		for metricValue(t, in.httpAddr, "bucketgrid_rls_breaker_opens_total") < 1 {
			if time.Now().After(deadline) {
				t.Fatalf("no breaker opened 30 s after Redis was killed")
			}
			time.Sleep(5 * time.Millisecond)
		}
		l.phase.Store(phaseOpen)
	}
	time.Sleep(2 * time.Second)
	rs.start(t)
	back := time.Now()
	res := redisOutageResult{outage: back.Sub(killed), resumed: -1}
	l.phase.Store(phaseBack)
	if degrade {
		// answers come from Redis again once the local decisions stop
		last, lastChange := metricValue(t, in.httpAddr, "bucketgrid_rls_degraded_total"), time.Now()
		deadline := time.Now().Add(30 * time.Second)
		for time.Since(lastChange) < time.Second {
			if time.Now().After(deadline) {
				t.Fatalf("still deciding locally 30 s after Redis came back")
			}
			time.Sleep(5 * time.Millisecond)
			if v := metricValue(t, in.httpAddr, "bucketgrid_rls_degraded_total"); v != last {
				last, lastChange = v, time.Now()
			}
		}
		res.resumed = max(lastChange.Sub(back), 0)
		res.degraded = last
	} else {
		time.Sleep(time.Second)
	}
	res.phases = l.finish()
	return res
}

// TestRedisOutageDegrades kills the Redis under a service with -degrade:
// every request is answered (none is left to Envoy's failure mode), the
// breaker opens, the instance admits no more than its bucket would over the
// outage, and answers come from Redis again once it is back. It logs the
// latency once the breaker is open and how soon answers resumed from Redis:
// figures, not assertions.
func TestRedisOutageDegrades(t *testing.T) {
	res := redisOutage(t, true)
	for p, o := range res.phases {
		if o.failed > 0 {
			t.Errorf("phase %d: %d requests failed, want every one answered", p, o.failed)
		}
	}
	open := res.phases[phaseOpen]
	if open.ok+open.over == 0 || res.degraded == 0 {
		t.Fatalf("no request decided while the breaker was open (%+v, %v degraded)", open.ok+open.over, res.degraded)
	}
	// one instance's share is the whole bucket: capacity 100 plus 100 a
	// second over the outage
	outage := res.phases[phaseFailing].ok + open.ok
	if bound := 100 + int64(100*res.outage.Seconds()+1); outage > bound {
		t.Errorf("admitted %d over an outage of %v, above the bucket's %d", outage, res.outage, bound)
	}
	t.Logf("outage %v: %d admitted, %d refused; breaker open: p50 %v, p99 %v, max %v over %d checks; answers from Redis again %v after it accepted connections",
		res.outage.Round(time.Millisecond), outage, res.phases[phaseFailing].over+open.over,
		percentile(open.latencies, 0.5), percentile(open.latencies, 0.99), percentile(open.latencies, 1),
		len(open.latencies), res.resumed.Round(time.Millisecond))
}

// BenchmarkRedisOutage measures what one instance over a killed Redis
// answers, without and with -degrade: run with -benchtime=1x (each run is
// a whole outage of about 2 s). Without degrade the failed requests go to
// Envoy's failure_mode_deny: admitted under fail-open (Envoy's default),
// refused under fail-closed.
//
//	go test -run '^$' -bench RedisOutage -benchtime=1x ./cmd/bucketgrid
func BenchmarkRedisOutage(b *testing.B) {
	for _, degrade := range []bool{false, true} {
		name := "without-degrade"
		if degrade {
			name = "degrade"
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				res := redisOutage(b, degrade)
				var during outcome
				for _, p := range []int{phaseFailing, phaseOpen} {
					o := res.phases[p]
					during.ok, during.over, during.failed = during.ok+o.ok, during.over+o.over, during.failed+o.failed
					during.latencies = append(during.latencies, o.latencies...)
				}
				secs := res.outage.Seconds()
				b.ReportMetric(float64(during.ok)/secs, "admitted/s")
				b.ReportMetric(float64(during.over)/secs, "refused/s")
				b.ReportMetric(float64(during.failed)/secs, "failed/s")
				b.ReportMetric(float64(percentile(during.latencies, 0.99).Microseconds()), "p99-µs")
				if degrade {
					open := res.phases[phaseOpen].latencies
					b.ReportMetric(float64(percentile(open, 0.99).Microseconds()), "p99-open-µs")
					b.ReportMetric(float64(res.resumed.Milliseconds()), "resumed-ms")
				}
			}
		})
	}
}

// crashTally counts one descriptor's answers in one phase of a crash; by
// holds the same per client.
type crashTally struct {
	ok, over, failed int64
	by               [3][3]int64 // [client][ok, over, failed]
}

// crashLoad sends requests for every value, round robin, from 16
// goroutines, to the clients in turn: n requests per value, or until
// stop is closed when n is 0.
func crashLoad(clients []rlspb.RateLimitServiceClient, values []string, n int, stop <-chan struct{}) []crashTally {
	tallies := make([]crashTally, len(values))
	var mu sync.Mutex
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if n > 0 && i >= int64(n*len(values)) {
					return
				}
				if n == 0 {
					select {
					case <-stop:
						return
					default:
					}
				}
				v := int(i % int64(len(values)))
				c := int(i/int64(len(values))) % len(clients)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				r, err := clients[c].ShouldRateLimit(ctx, req("cluster", "bucket", values[v]))
				cancel()
				mu.Lock()
				switch {
				case err != nil:
					tallies[v].failed++
					tallies[v].by[c][2]++
				case r.OverallCode == rlspb.RateLimitResponse_OK:
					tallies[v].ok++
					tallies[v].by[c][0]++
				default:
					tallies[v].over++
					tallies[v].by[c][1]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return tallies
}

// gridCrashResult is one run of gridCrash, per descriptor and phase.
type gridCrashResult struct {
	before, during, after []crashTally
	window                time.Duration // from the kill until every descriptor answered from the grid again
}

// gridCrash runs three instances, spends 60 of each descriptor's 200
// tokens over all three, kills one, loads the survivors for 3 s (the
// crash fail-over window lasts longer), waits until every descriptor is
// answered by the grid again, and spends 250 requests per descriptor more.
func gridCrash(t testing.TB, degrade bool) gridCrashResult {
	t.Helper()
	dir := writeConfig(t, t.TempDir(), map[string]string{"cluster.yaml": clusterConfig})
	extra := []string{"-config", dir, "-timeout", "1s", "-degrade=" + strconv.FormatBool(degrade)}
	procs := startCluster(t, 3, extra...)
	var all []rlspb.RateLimitServiceClient
	for _, p := range procs {
		all = append(all, client(t, p.grpcAddr))
	}
	survivors := all[1:]
	values := make([]string, 30)
	for i := range values {
		values[i] = fmt.Sprintf("k%d-%s", i, randHex(3))
	}
	var res gridCrashResult
	// a grid just formed holds its keys while partitions are handed over:
	// wait (on keys of their own) until the members answer from it
	warm := make([]string, len(values))
	for i := range warm {
		warm[i] = "warm-" + values[i]
	}
	waitGrid(t, procs, all, warm, time.Now().Add(90*time.Second))
	res.before = crashLoad(all, values, 60, nil)
	procs[0].Kill()
	killed := time.Now()
	stop := make(chan struct{})
	time.AfterFunc(3*time.Second, func() { close(stop) }) // a load window, not a synchronisation
	res.during = crashLoad(survivors, values, 0, stop)
	// fail-over: every descriptor answered by the grid, none decided locally
	probes := waitGrid(t, procs[1:], survivors, values, killed.Add(90*time.Second))
	res.window = time.Since(killed)
	for _, p := range procs[1:] {
		t.Logf("survivor %s: degraded %v, breakers opened %v, open %v, charged %v", p.member,
			metricValue(t, p.httpAddr, "bucketgrid_rls_degraded_total"), metricValue(t, p.httpAddr, "bucketgrid_rls_breaker_opens_total"),
			metricValue(t, p.httpAddr, "bucketgrid_rls_breakers_open"), metricValue(t, p.httpAddr, "bucketgrid_rls_degrade_charged_tokens_total"))
	}
	res.after = crashLoad(survivors, values, 250, nil)
	for len(probes) > 0 { // fold the probes of the fail-over wait into the after phase
		for i := range values {
			res.after[i].ok += probes[i].ok
			res.after[i].over += probes[i].over
			res.after[i].failed += probes[i].failed
		}
		probes = probes[len(values):]
	}
	return res
}

// waitGrid sends a request per value to every client until one round is
// answered without an error and without a decision from a local share
// (the instances' degraded_total unchanged), and returns the tallies of
// the requests it sent.
func waitGrid(t testing.TB, procs []*proc, clients []rlspb.RateLimitServiceClient, values []string, deadline time.Time) []crashTally {
	t.Helper()
	degraded := func() (sum float64) {
		for _, p := range procs {
			sum += metricValue(t, p.httpAddr, "bucketgrid_rls_degraded_total")
		}
		return sum
	}
	var sent []crashTally
	for {
		before := degraded()
		ok := true
		for _, tl := range crashLoad(clients, values, len(clients), nil) {
			ok = ok && tl.failed == 0
			sent = append(sent, tl)
		}
		if ok && degraded() == before {
			return sent
		}
		if time.Now().After(deadline) {
			t.Fatalf("the grid still does not answer every key")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestGridCrashDegrades kills one of three instances under load with
// -degrade: the requests for its keys, which failed (and went to Envoy's
// failure mode) until the survivors took its keys over, are decided from
// the survivors' local shares; no descriptor admits more than its limit
// plus one capacity, and no client of a surviving bucket is refused below
// its share while the crash lasts. A bucket the crashed owner held (one
// replica) starts again empty on its new owner (the grid's LostState):
// the grid refuses it afterwards, the shares' charges land in it, and its
// descriptor may end below its limit; those are counted, not held to the
// lower bounds.
func TestGridCrashDegrades(t *testing.T) {
	const limit = 200
	res := gridCrash(t, true)
	// the share of a descriptor on each of the two survivors, cut for the
	// three members the grid still counts: ⌈200/3⌉
	const share = 2 * (limit + 2) / 3
	restarted, lost := 0, 0
	for i := range res.during {
		b, d, a := res.before[i], res.during[i], res.after[i]
		if b.failed+d.failed+a.failed > 0 {
			t.Errorf("descriptor %d: %d, %d and %d requests failed before, during and after, want none", i, b.failed, d.failed, a.failed)
		}
		total := b.ok + d.ok + a.ok
		if total > 2*limit {
			t.Errorf("descriptor %d: %d admitted, above its limit plus one capacity (%d)", i, total, 2*limit)
		}
		// A surviving bucket had at least limit − before − share left
		// after the crash; one the grid refuses entirely afterwards
		// started again empty.
		if a.ok == 0 && a.over > 0 && total < limit {
			lost++
			continue
		}
		if total < limit {
			t.Errorf("descriptor %d: %d admitted, below its limit %d", i, total, limit)
		}
		if left := limit - b.ok; d.ok < min(left, share) && d.ok+d.over > d.ok {
			t.Errorf("descriptor %d: %d admitted while the crash lasted (and %d refused), below its share %d; during %v after %+v", i, d.ok, d.over, min(left, share), d.by, a)
		}
		if total > limit {
			restarted++
		}
	}
	var during crashTally
	for _, d := range res.during {
		during.ok, during.over, during.failed = during.ok+d.ok, during.over+d.over, during.failed+d.failed
	}
	t.Logf("crash: the grid answered every descriptor again %v after it; in the 3 s after it %d admitted, %d refused, %d failed; %d of %d descriptors admitted above the limit (the shares), %d started again empty",
		res.window.Round(time.Millisecond), during.ok, during.over, during.failed, restarted, len(res.during), lost)
	if lost == len(res.during) {
		t.Error("every descriptor's bucket started again empty: the crash took one member's")
	}
}

// BenchmarkGridCrash measures what the two survivors of a crash answer in
// the 3 s after it, without and with -degrade: run with -benchtime=1x.
// Without degrade the failed requests go to Envoy's failure_mode_deny:
// admitted under fail-open (Envoy's default), refused under fail-closed.
//
//	go test -run '^$' -bench GridCrash -benchtime=1x ./cmd/bucketgrid
func BenchmarkGridCrash(b *testing.B) {
	for _, degrade := range []bool{false, true} {
		name := "without-degrade"
		if degrade {
			name = "degrade"
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				res := gridCrash(b, degrade)
				var during, total crashTally
				for i, d := range res.during {
					during.ok, during.over, during.failed = during.ok+d.ok, during.over+d.over, during.failed+d.failed
					total.ok += res.before[i].ok + d.ok + res.after[i].ok
					total.failed += res.before[i].failed + d.failed + res.after[i].failed
				}
				n := float64(len(res.during))
				b.ReportMetric(float64(during.ok)/n, "admitted/descriptor")
				b.ReportMetric(float64(during.over)/n, "refused/descriptor")
				b.ReportMetric(float64(during.failed)/n, "failed/descriptor")
				b.ReportMetric(float64(total.ok)/n, "total-admitted/descriptor")
				b.ReportMetric(float64(total.failed)/n, "total-failed/descriptor")
				b.ReportMetric(res.window.Seconds(), "failover-s")
			}
		})
	}
}
