package tck

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// liveReads and liveBudget bound checkLiveKeyFound: this many Gets, or this
// much real time, whichever ends first. 2000 reads miss a fault that hits
// one read in 100 with odds of 2e-9; a slow store reading 500 per second
// still makes 1000 (odds 4e-5).
const (
	liveReads  = 2000
	liveBudget = 2 * time.Second
)

// checkLiveKeyFound reads live keys — written by Insert, by Replace, with
// and without a TTL — from several goroutines: none may ever be reported
// absent. A spurious "absent" re-creates a bucket full, or fails a request
// under WithRecoveryFail.
func checkLiveKeyFound(e *env) {
	s, ctx := e.store, e.ctx
	keys := []struct {
		name string
		ttl  time.Duration
		repl bool
	}{
		{"inserted", 0, false},
		{"inserted with a 1 h TTL", time.Hour, false},
		{"replaced", 0, true},
	}
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = e.key(fmt.Sprintf("live-%d", i))
		if ok, err := s.Insert(ctx, names[i], []byte{byte(i), 0}, k.ttl); err != nil || !ok {
			e.Fatalf("Insert: ok=%v err=%v", ok, err)
		}
		if k.repl {
			_, ver, _, err := s.Get(ctx, names[i])
			if err != nil {
				e.Fatalf("Get: %v", err)
			}
			if ok, err := s.Replace(ctx, names[i], []byte{byte(i), 1, 0}, ver, k.ttl); err != nil || !ok {
				e.Fatalf("Replace: ok=%v err=%v", ok, err)
			}
		}
	}
	var reads, errs atomic.Int64
	absent := make([]atomic.Int64, len(keys))
	var firstErr atomic.Value
	deadline := time.Now().Add(liveBudget)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; time.Now().Before(deadline) && ctx.Err() == nil; i++ {
				if reads.Add(1) > liveReads {
					reads.Add(-1)
					return
				}
				_, _, found, err := s.Get(ctx, names[i%len(names)])
				switch {
				case err != nil:
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err)
				case !found:
					absent[i%len(names)].Add(1)
				}
			}
		}()
	}
	wg.Wait()
	n := reads.Load()
	e.Logf("%d reads of live keys", n)
	for i, k := range keys {
		if a := absent[i].Load(); a > 0 {
			e.Errorf("Get reported a live key (%s) absent %d times in about %d reads: found=false must mean the key is absent. A spurious \"absent\" re-creates the bucket full (over-admission) or fails the request under WithRecoveryFail; a read that cannot tell (a replica behind, a timeout, a cache miss) must return an error",
				k.name, a, n/int64(len(keys)))
		}
	}
	if x := errs.Load(); x > 0 {
		e.Errorf("Get of a live key failed %d times in %d reads (first: %v): a healthy store must answer reads", x, n, firstErr.Load())
	}
}
