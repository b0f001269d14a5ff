package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// shareConfig is a fixed window and a token bucket of 12 a day: over a
// test of seconds the bucket refills nothing worth a token, so what each
// instance admits from its share is exactly ⌈12/n⌉.
const shareConfig = `
domain: share
descriptors:
  - key: window
    rate_limit: {unit: day, requests_per_unit: 12}
  - key: bucket
    rate_limit: {unit: day, requests_per_unit: 12, algorithm: token_bucket}
`

const shareLimit = 12

// pause stops the server without closing its connections, as a hung
// store: clients wait for replies that do not come.
func (r *redisServer) pause(t testing.TB) {
	t.Helper()
	if err := r.proc.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
}

// resume lets a paused server go on.
func (r *redisServer) resume(t testing.TB) {
	t.Helper()
	if err := r.proc.Cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
}

// tally counts the answers to a group of checks.
type tally struct {
	ok, over, failed int
	limits           map[uint32]int // current_limit.requests_per_unit of the answers
}

// checkWait is a check's deadline: the client's, which the service keeps
// (Envoy's rate-limit filter gives up after 20 ms unless configured).
var checkWait = 10 * time.Second

// checkAll sends n checks of one descriptor to c at once and counts the
// answers.
func checkAll(c rlspb.RateLimitServiceClient, key, value string, n int) tally {
	tl := tally{limits: map[uint32]int{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), checkWait)
			defer cancel()
			r, err := c.ShouldRateLimit(ctx, req("share", key, value))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				tl.failed++
				return
			case r.OverallCode == rlspb.RateLimitResponse_OK:
				tl.ok++
			default:
				tl.over++
			}
			if len(r.Statuses) == 1 && r.Statuses[0].CurrentLimit != nil {
				tl.limits[r.Statuses[0].CurrentLimit.RequestsPerUnit]++
			}
		})
	}
	wg.Wait()
	return tl
}

// waitMetric polls an instance's metric until ok accepts its value.
func waitMetric(t testing.TB, httpAddr, name, what string, ok func(float64) bool) float64 {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		v := metricValue(t, httpAddr, name)
		if ok(v) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s is %v after 30 s", what, name, v)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// sharedOutage is what one run of redisSharedOutage measured.
type sharedOutage struct {
	during    [2][2]tally // [instance][window, bucket] while Redis hung
	open      []time.Duration
	openOK    int // of the open-breaker checks, the ones admitted
	openOver  int
	openError int
	resumed   [2]time.Duration // per instance, from SIGCONT to its first answer from Redis; -1 without degrade
	after     [2]tally         // [window, bucket] from Redis, after the charges
	charged   bool             // every local consumption was charged back
	held      bool             // the count stayed 3 while Redis hung, after an instance died
	dropped   time.Duration    // from SIGCONT until the dead instance left the count
	chargedBy time.Duration    // from SIGCONT until both instances had charged everything
}

// redisSharedOutage runs three instances on one Redis of the test's own,
// with -degrade and the instances counted (-degrade-count), or without
// degrade; hangs Redis (SIGSTOP); sends 20 checks of one fixed window and
// one token bucket to each of two instances, all at once; kills the third
// instance; measures checks on new descriptors once the breaker is open,
// for at least twice the count's TTL; resumes Redis and measures how soon
// an answer comes from it again; and after the local consumption is
// charged back, spends the descriptors through Redis.
func redisSharedOutage(t testing.TB, degrade bool) sharedOutage {
	t.Helper()
	const countTTL = 2 * time.Second
	rs := startRedis(t)
	dir := writeConfig(t, t.TempDir(), map[string]string{"share.yaml": shareConfig})
	args := []string{"-config", dir, "-backend", "redis://" + rs.addr() + "?prefix=share:", "-timeout", "1s"}
	if degrade {
		args = append(args, "-degrade", "-degrade-count", "-degrade-count-ttl", countTTL.String())
	}
	var procs []*proc
	var clients []rlspb.RateLimitServiceClient
	for range 3 {
		p := startProc(t, gridPort(t), nil, args...)
		procs, clients = append(procs, p), append(clients, client(t, p.grpcAddr))
	}
	if degrade {
		for i, p := range procs {
			waitMetric(t, p.httpAddr, "bucketgrid_rls_degrade_instances", fmt.Sprintf("instance %d counting its peers", i),
				func(v float64) bool { return v == 3 })
		}
	}
	// the connections are up and Redis answers
	for i, c := range clients {
		if tl := checkAll(c, "window", "warm-"+randHex(4), 1); tl.ok != 1 || tl.limits[shareLimit] != 1 {
			t.Fatalf("instance %d before the outage: %+v, want one admitted by Redis (limit %d)", i, tl, shareLimit)
		}
	}

	var res sharedOutage
	values := [2]string{"w-" + randHex(4), "b-" + randHex(4)}
	rs.pause(t)
	defer rs.resume(t) // before the cleanup kills it, in case of a failure
	for i := range 2 {
		for d, key := range []string{"window", "bucket"} {
			res.during[i][d] = checkAll(clients[i], key, values[d], 20)
		}
	}
	procs[2].Kill()
	killed := time.Now()
	if degrade {
		for i := range 2 {
			waitMetric(t, procs[i].httpAddr, "bucketgrid_rls_breaker_opens_total", fmt.Sprintf("instance %d's breaker", i),
				func(v float64) bool { return v >= 1 })
		}
	}
	// checks once the breaker is open, on 100 descriptors of their own,
	// from 4 callers pausing a millisecond between checks, for at least
	// twice the count's TTL: the dead instance's record expires meanwhile,
	// and the count must not change
	var mu sync.Mutex
	var wg sync.WaitGroup
	until := killed.Add(2 * countTTL)
	openValues := make([]string, 100)
	for i := range openValues {
		openValues[i] = fmt.Sprintf("o%d-%s", i, randHex(4))
	}
	for range 4 {
		wg.Go(func() {
			for n := 0; n < 250 || time.Now().Before(until); n++ {
				ctx, cancel := context.WithTimeout(context.Background(), checkWait)
				start := time.Now()
				r, err := clients[0].ShouldRateLimit(ctx, req("share", "bucket", openValues[n%len(openValues)]))
				d := time.Since(start)
				cancel()
				mu.Lock()
				res.open = append(res.open, d)
				switch {
				case err != nil:
					res.openError++
				case r.OverallCode == rlspb.RateLimitResponse_OK:
					res.openOK++
				default:
					res.openOver++
				}
				mu.Unlock()
				if !degrade && n >= 3 && time.Now().After(until) {
					return // each waits the whole timeout: a few are enough
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
	wg.Wait()
	res.resumed = [2]time.Duration{-1, -1}
	if degrade {
		res.held = metricValue(t, procs[0].httpAddr, "bucketgrid_rls_degrade_instances") == 3
	}

	rs.resume(t)
	back := time.Now()
	if degrade {
		// the first answer that describes the whole limit came from Redis;
		// an instance probes its breaker while checks come, so both get some
		for i := range 2 {
			deadline := back.Add(30 * time.Second)
			for {
				if tl := checkAll(clients[i], "window", "r-"+randHex(6), 1); tl.limits[shareLimit] == 1 {
					res.resumed[i] = time.Since(back)
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("instance %d: no answer from Redis 30 s after it resumed", i)
				}
				time.Sleep(2 * time.Millisecond)
			}
		}
		// every token consumed locally is charged back: a fixed window
		// counts every hit, refused ones too (as envoyproxy/ratelimit
		// does), a token bucket what it admitted, the open-breaker
		// checks' included
		hits := func(tl tally) int { return tl.ok + tl.over }
		want := [2]float64{float64(hits(res.during[0][0]) + res.during[0][1].ok + res.openOK),
			float64(hits(res.during[1][0]) + res.during[1][1].ok)}
		res.charged = true
		charged := time.Duration(0)
		for i := range 2 {
			deadline := time.Now().Add(30 * time.Second)
			for metricValue(t, procs[i].httpAddr, "bucketgrid_rls_degrade_charged_tokens_total") < want[i] {
				if time.Now().After(deadline) {
					res.charged = false
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			charged = time.Since(back)
		}
		deadline := time.Now().Add(30 * time.Second)
		for metricValue(t, procs[0].httpAddr, "bucketgrid_rls_degrade_instances") != 2 {
			if time.Now().After(deadline) {
				t.Fatalf("the dead instance is still counted 30 s after Redis resumed")
			}
			time.Sleep(10 * time.Millisecond)
		}
		res.dropped = time.Since(back)
		res.chargedBy = charged
	}
	for d, key := range []string{"window", "bucket"} {
		res.after[d] = checkAll(clients[0], key, values[d], shareLimit)
	}
	return res
}

// TestRedisHangSharedByCountedInstances hangs the Redis under three
// instances that count each other (-degrade -degrade-count): each of the
// two that get checks admits exactly its share ⌈12/3⌉ = 4 of a fixed
// window and of a token bucket and describes the share (limit 4), none is
// left unanswered; the breakers open; the count stays 3 while Redis hangs
// although the third instance died, and drops to 2 once Redis is back;
// answers come from Redis again (limit 12); and once what was admitted
// locally is charged back, Redis admits only what is left of the limit
// (nothing of the window, which counts refused hits too).
// It logs the open-breaker latency and how soon Redis answered again:
// figures, not assertions.
func TestRedisHangSharedByCountedInstances(t *testing.T) {
	day := time.Now().UTC().YearDay()
	res := redisSharedOutage(t, true)
	if time.Now().UTC().YearDay() != day { // the fixed window rolled over: once more, in the new day
		res = redisSharedOutage(t, true)
	}
	share := (shareLimit + 2) / 3
	for i := range 2 {
		for d, name := range []string{"fixed window", "token bucket"} {
			tl := res.during[i][d]
			if tl.ok != share || tl.over != 20-share || tl.failed != 0 || tl.limits[uint32(share)] != 20 {
				t.Errorf("instance %d, %s, Redis hung: %d admitted, %d refused, %d failed, limits %v; want %d admitted and %d refused, all with limit %d",
					i, name, tl.ok, tl.over, tl.failed, tl.limits, share, 20-share, share)
			}
		}
	}
	if res.openError > 0 || res.openOK == 0 {
		t.Errorf("breaker open: %d admitted, %d refused, %d failed; want every check answered", res.openOK, res.openOver, res.openError)
	}
	if !res.held {
		t.Errorf("the count changed while Redis hung: it must stay the last one seen")
	}
	if !res.charged {
		t.Logf("a charge back was given up (best effort); the spend after the outage is not judged")
	} else {
		// the shared descriptors hold what the two instances did not take
		// (the dead instance's consumption is charged by nobody): the
		// window counted all 40 hits, the bucket lost the 2×4 admitted
		for d, name := range []string{"fixed window", "token bucket"} {
			tl := res.after[d]
			taken := res.during[0][d].ok + res.during[1][d].ok
			if d == 0 {
				taken += res.during[0][d].over + res.during[1][d].over
			}
			left := max(shareLimit-taken, 0)
			if tl.ok != left || tl.failed != 0 || tl.limits[shareLimit] != shareLimit {
				t.Errorf("%s after the outage: %d admitted (limits %v, %d failed), want the %d left of %d, answered by Redis",
					name, tl.ok, tl.limits, tl.failed, left, shareLimit)
			}
		}
	}
	t.Logf("Redis hung: breaker open, %d checks: p50 %v, p99 %v, max %v; after SIGCONT: answers from Redis again after %v and %v, everything charged back after %v, the dead instance out of the count after %v",
		len(res.open), percentile(res.open, 0.5), percentile(res.open, 0.99), percentile(res.open, 1),
		res.resumed[0].Round(time.Millisecond), res.resumed[1].Round(time.Millisecond), res.chargedBy.Round(time.Millisecond),
		res.dropped.Round(time.Millisecond))
}

// BenchmarkRedisHang measures three instances over a hung Redis
// (SIGSTOP), without and with -degrade -degrade-count: run with
// -benchtime=1x (each run is a whole outage). It reports per instance and
// descriptor the checks admitted, refused and failed of 20 sent at once
// (without degrade every one fails after -timeout and goes to Envoy's
// failure_mode_deny; the checks' deadline is then 1 s, not 10 s), the
// latency of checks once the breaker is open, and how soon answers came
// from Redis again.
//
//	go test -run '^$' -bench RedisHang -benchtime=1x ./cmd/bucketgrid
func BenchmarkRedisHang(b *testing.B) {
	for _, degrade := range []bool{false, true} {
		b.Run("degrade="+strconv.FormatBool(degrade), func(b *testing.B) {
			if !degrade { // every check waits for its deadline: a short one
				defer func(d time.Duration) { checkWait = d }(checkWait)
				checkWait = time.Second
			}
			for range b.N {
				res := redisSharedOutage(b, degrade)
				var ok, over, failed int
				for i := range 2 {
					for d := range 2 {
						tl := res.during[i][d]
						ok, over, failed = ok+tl.ok, over+tl.over, failed+tl.failed
					}
				}
				b.ReportMetric(float64(ok)/4, "admitted/group")
				b.ReportMetric(float64(over)/4, "refused/group")
				b.ReportMetric(float64(failed)/4, "failed/group")
				b.ReportMetric(float64(percentile(res.open, 0.5).Microseconds()), "p50-open-µs")
				b.ReportMetric(float64(percentile(res.open, 0.99).Microseconds()), "p99-open-µs")
				b.ReportMetric(float64(len(res.open)), "open-checks")
				if degrade {
					b.ReportMetric(float64(max(res.resumed[0], res.resumed[1]).Microseconds())/1000, "resumed-ms")
				}
			}
		})
	}
}
