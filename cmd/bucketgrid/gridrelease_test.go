package main

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// floodConfig limits every value of key k per second: each distinct value
// is a bucket of its own, full again a second after its one check, and
// gone from the grid expiryMargin later.
const floodConfig = `
domain: flood
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 5}
`

// liveHeap is the live heap of this process after a collection.
func liveHeap() int64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// TestGridFloodIsReleased: an attacker sends checks of floodKeys distinct
// descriptor values to an instance whose buckets live in its embedded grid
// member, then stops. Each bucket expires expiryMargin after it is full
// again (a second here); once they have, the instance's live heap returns
// to within a bound of its level before the flood, while an honest client
// goes on checking its own descriptor.
func TestGridFloodIsReleased(t *testing.T) {
	const (
		keys    = floodKeys
		perCall = 64 // descriptors per check, the most -grpc-max-recv's help promises
		workers = 8
	)
	dir := writeConfig(t, t.TempDir(), map[string]string{"flood.yaml": floodConfig})
	in := startInstance(t, "-config", dir, "-grpc-addr", "127.0.0.1:0", "-http-addr", "",
		"-backend", "grid", "-grid-bind", fmt.Sprintf("127.0.0.1:%d", gridPort(t)))
	c := client(t, in.grpcAddr)
	check := func(ctx context.Context, values ...string) error {
		r := &rlspb.RateLimitRequest{Domain: "flood"}
		for _, v := range values {
			r.Descriptors = append(r.Descriptors, &commonpb.RateLimitDescriptor{
				Entries: []*commonpb.RateLimitDescriptor_Entry{{Key: "k", Value: v}}})
		}
		resp, err := c.ShouldRateLimit(ctx, r)
		if err != nil {
			return err
		}
		if resp.OverallCode != rlspb.RateLimitResponse_OK {
			return fmt.Errorf("check of %d fresh values: %v, want OK", len(values), resp.OverallCode)
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*releaseDeadline)
	defer cancel()
	honest := func() {
		t.Helper()
		if _, err := c.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "flood", Descriptors: []*commonpb.RateLimitDescriptor{{
			Entries: []*commonpb.RateLimitDescriptor_Entry{{Key: "k", Value: "honest"}}}}}); err != nil {
			t.Fatal(err)
		}
	}
	honest()
	before := liveHeap()

	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				first := next.Add(perCall) - perCall
				if first >= keys {
					return
				}
				vs := make([]string, 0, perCall)
				for i := first; i < min(first+perCall, keys); i++ {
					vs = append(vs, "flood-"+strconv.FormatInt(i, 36))
				}
				if err := check(ctx, vs...); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	flooded := time.Since(start)
	peak := liveHeap()
	floodedAt := time.Now()

	bound := int64(releaseSlack + keys*perBucket)
	deadline := floodedAt.Add(releaseDeadline)
	var held int64
	lastLog := time.Now()
	for {
		honest()
		held = liveHeap() - before
		if held <= bound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d distinct descriptors (checked in %v) raised the live heap by %.1f MB; %v after the flood it is still +%.1f MB, want at most +%.1f MB",
				keys, flooded.Round(time.Millisecond), mb(peak-before), releaseDeadline, mb(held), mb(bound))
		}
		if testing.Verbose() && time.Since(lastLog) > 5*time.Second {
			lastLog = time.Now()
			t.Logf("%v after the flood: +%.1f MB", time.Since(floodedAt).Round(time.Second), mb(held))
		}
		time.Sleep(100 * time.Millisecond) // a poll interval, not a synchronisation
	}
	t.Logf("%d distinct descriptors checked in %v: live heap +%.1f MB at the peak, +%.1f MB %v after the flood (bound +%.1f MB)",
		keys, flooded.Round(time.Millisecond), mb(peak-before), mb(held), time.Since(floodedAt).Round(100*time.Millisecond), mb(bound))
}

const (
	// releaseSlack and perBucket bound how far above its level before a
	// flood the live heap may stay once the flood's buckets expired. What
	// stays is about 170 bytes a flooded bucket (16.5 MiB after 100,000,
	// measured), most of it the owner's cache of the states it wrote
	// (grid/olric Config.CacheEntries; about 12 MiB of it, measured with
	// the cache off), which keeps its entries until newer ones displace
	// them.
	releaseSlack = 3 << 20
	perBucket    = 200
	// releaseDeadline is how long after the flood the test waits for it:
	// emptied fragments are freed at Olric's empty-fragment check, once a
	// minute (kept: see grid/olric's expiredBucketRelease), and tables
	// compacted within 30 s after.
	releaseDeadline = 120 * time.Second
)

func mb(n int64) float64 { return float64(n) / (1 << 20) }
