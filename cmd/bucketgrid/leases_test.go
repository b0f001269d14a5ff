package main

import (
	"context"
	"flag"
	"io"
	"sync"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// leasesConfig has a fixed window that ends every second, and a fixed
// window and a token bucket too large to run out during a test.
const leasesConfig = `
domain: leases
descriptors:
  - key: second
    rate_limit: {unit: second, requests_per_unit: 30}
  - key: fixed
    rate_limit: {unit: year, requests_per_unit: 100000}
  - key: bucket
    rate_limit: {unit: year, requests_per_unit: 100000, algorithm: token_bucket}
`

// TestClusterLeasesWhereExact: three instances with -grid-leases=exact
// and a lease lifetime of a second, longer than the
// window. From the client's side:
//   - a fixed window of a second never admits more than its limit in any
//     window, across window boundaries, with checks spread over the three
//     instances (a lease ends before its window does);
//   - a fixed window is decided on leases: sequential checks sent to the
//     instances in turn see remaining counts that go up, which only a
//     lease's view of the count (as of its grant, less its own checks)
//     gives;
//   - a token bucket takes no lease: the same sequential checks see its
//     remaining tokens never go up (one token refills every five minutes).
func TestClusterLeasesWhereExact(t *testing.T) {
	dir := writeConfig(t, t.TempDir(), map[string]string{"leases.yaml": leasesConfig})
	procs := startCluster(t, 3, "-config", dir, "-grid-leases=exact", "-grid-lease-lifetime", "1s")
	var clients []rlspb.RateLimitServiceClient
	for _, p := range procs {
		clients = append(clients, client(t, p.grpcAddr))
	}
	t.Run("window boundaries", func(t *testing.T) {
		const limit, second = 30, int64(time.Second)
		value := "v" + randHex(4)
		var mu sync.Mutex
		certain := map[int64]int64{} // admitted checks whose call lay within one window, by window
		ambiguous, failed := 0, 0
		end := time.Now().Add(3500 * time.Millisecond)
		var wg sync.WaitGroup
		for g := range 12 {
			c := clients[g%len(clients)]
			wg.Go(func() {
				for time.Now().Before(end) {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					t0 := time.Now().UnixNano()
					r, err := c.ShouldRateLimit(ctx, req("leases", "second", value))
					t1 := time.Now().UnixNano()
					cancel()
					mu.Lock()
					switch {
					case err != nil || refusedWithoutBucket(r):
						failed++
					case r.OverallCode != rlspb.RateLimitResponse_OK:
					case t0/second != t1/second:
						ambiguous++
					default:
						certain[t0/second]++
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if failed > 0 {
			t.Fatalf("%d checks failed", failed)
		}
		full := 0
		for w, n := range certain {
			if n > limit {
				t.Errorf("window %d: %d admitted, limit %d", w, n, limit)
			}
			if n == limit {
				full++
			}
		}
		t.Logf("admitted per window (calls within one window): %v; %d admitted calls spanned a boundary; %d windows full", certain, ambiguous, full)
		if len(certain) < 2 {
			t.Fatalf("admissions in %d windows: the test saw no boundary", len(certain))
		}
	})
	// remaining returns the remaining counts of n sequential checks of
	// key, sent to the instances in turn.
	remaining := func(t *testing.T, key string, n int) []uint32 {
		value := "v" + randHex(4)
		var out []uint32
		for i := range n {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			r, err := clients[i%len(clients)].ShouldRateLimit(ctx, req("leases", key, value))
			cancel()
			if err != nil || r.OverallCode != rlspb.RateLimitResponse_OK || len(r.Statuses) != 1 {
				t.Fatalf("%s: check %d: %v %v", key, i, r, err)
			}
			out = append(out, r.Statuses[0].LimitRemaining)
		}
		return out
	}
	ups := func(rs []uint32) (n int) {
		for i := 1; i < len(rs); i++ {
			if rs[i] > rs[i-1] {
				n++
			}
		}
		return n
	}
	t.Run("fixed window leased", func(t *testing.T) {
		rs := remaining(t, "fixed", 300)
		if n := ups(rs); n == 0 {
			t.Fatalf("300 sequential checks of a fixed window over 3 instances: remaining never went up, so none was decided on a lease: %v", rs)
		} else {
			t.Logf("remaining went up %d times in 300 checks", n)
		}
	})
	t.Run("token bucket not leased", func(t *testing.T) {
		rs := remaining(t, "bucket", 300)
		if n := ups(rs); n > 0 {
			t.Fatalf("300 sequential checks of a token bucket over 3 instances: remaining went up %d times (leased): %v", n, rs)
		}
	})
}

// TestGridLeasesFlag: -grid-leases leases nothing by default (off) or with
// =off or =false, fixed windows alone with =exact, and every bucket when
// given bare, as when it was a boolean, or =all.
func TestGridLeasesFlag(t *testing.T) {
	for _, tc := range []struct {
		args           []string
		enabled, exact bool
	}{
		{nil, false, false},
		{[]string{"-grid-leases=exact"}, false, true},
		{[]string{"-grid-leases"}, true, false},
		{[]string{"-grid-leases=true"}, true, false},
		{[]string{"-grid-leases=all"}, true, false},
		{[]string{"-grid-leases=off"}, false, false},
		{[]string{"-grid-leases=false"}, false, false},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		s, err := parseFlags(fs, append([]string{"-config", "x"}, tc.args...))
		if err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		cfg, err := gridConfig(s.Grid)
		if err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		if cfg.Leases.Enabled != tc.enabled || cfg.Leases.Exact != tc.exact {
			t.Errorf("%q: Enabled %v, Exact %v; want %v, %v", tc.args, cfg.Leases.Enabled, cfg.Leases.Exact, tc.enabled, tc.exact)
		}
	}
}
