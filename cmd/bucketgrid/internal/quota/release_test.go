package quota

import (
	"context"
	"errors"
	"io"
	"runtime"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
)

// heapAlloc is the live heap after a collection.
func heapAlloc() int64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// TestFloodIsReleased: a client that fills the table with buckets of their
// own grid buckets and closes its streams leaves nothing behind once the
// release time has passed, while an Envoy goes on using the service: no
// bucket, ghost or pool of the flood is tracked, and the live heap is back
// near where it was before the flood. The release time is the server's
// (releaseAfter) and then the grid's: a grid bucket expires a minute after
// it is full again (time.Minute; a second of refill at
// 1000/s), and the memory store drops it at its next sweep (a second).
func TestFloodIsReleased(t *testing.T) {
	const (
		streams   = 8
		perStream = 5000 // in reports of 1000 new ids
	)
	f := newFleet(t, perTenantRules, Options{})
	honest := f.raw()
	honestID := map[string]string{"tenant": "honest"}
	use := func() {
		honest.send(reportOf(usageOf(honestID, 1, 0, f.srv.opts.Period)))
		f.settle()
		honest.actions()
	}
	use()
	before := heapAlloc()
	n := 0
	var raws []*rawStream
	for range streams {
		r := f.raw()
		raws = append(raws, r)
		for range perStream / 1000 {
			var us []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage
			for range 1000 {
				us = append(us, usageOf(tenantID(n), 1, 0, 0))
				n++
			}
			r.send(reportOf(us...))
			f.settle()
			r.actions()
		}
	}
	if s := f.srv.Stats(); s.Buckets != n+1 || s.GridBuckets != n+1 {
		t.Fatalf("%d ids sent, %d buckets tracked in %d pools: want all and the honest one", n, s.Buckets, s.GridBuckets)
	}
	peak := heapAlloc()
	for _, r := range raws {
		if err := r.st.CloseSend(); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-r.ended:
			if !errors.Is(err, io.EOF) {
				t.Fatalf("stream ended with %v, want its end", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a closed stream was not ended")
		}
	}
	release := f.srv.releaseAfter() + time.Second + time.Minute + time.Second
	for closedAt := f.clk.Now(); f.clk.Now()-closedAt <= int64(release); {
		f.clk.Advance(f.srv.opts.Period)
		f.srv.tick(context.Background())
		f.srv.drain(context.Background())
		use()
	}
	// what stays: the executor's memory of buckets (cas.MemoryConfig, at
	// most 16 MiB), its expired entries evicted only as new ones arrive
	bound := max(4<<20, (peak-before)/6)
	var s Stats
	var held int64
	deadline := time.Now().Add(60 * time.Second)
	for {
		s = f.srv.Stats()
		// an operation on the store, as any check would be: the memory
		// store sweeps what expired at its next operation
		if _, _, _, err := f.store.Get(context.Background(), "check"); err != nil {
			t.Fatal(err)
		}
		held = heapAlloc() - before
		if s.Buckets+s.Ghosts == 1 && s.GridBuckets == 1 && s.TrackedBytes == subCost(canonical(&rlqspb.BucketId{Bucket: honestID})) && held <= bound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v after %d buckets' streams closed (peak heap +%d MB): %d buckets, %d ghosts, %d pools, %d bytes tracked (want the honest Envoy's only); heap +%d MB, want at most +%d MB",
				release, n, (peak-before)>>20, s.Buckets, s.Ghosts, s.GridBuckets, s.TrackedBytes, held>>20, bound>>20)
		}
		runtime.Gosched()
	}
	t.Logf("%d buckets: heap +%.1f MB at the peak, +%.1f MB %v after their streams closed", n, float64(peak-before)/(1<<20), float64(held)/(1<<20), release)
}
