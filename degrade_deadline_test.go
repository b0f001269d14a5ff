package bucketgrid_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/cas/memstore"
	"github.com/bucketgrid/bucketgrid/clock"
)

// envoyTimeout is the default timeout of Envoy's rate-limit filters
// (PROTOBUF_GET_MS_OR_DEFAULT(proto_config, timeout, 20) in
// source/extensions/filters/http/ratelimit/config.cc), with
// failure_mode_deny false: a check not answered within it passes unlimited.
const envoyTimeout = 20 * time.Millisecond

// outageStart runs checks concurrently against a store that hangs from
// the first of them, with a Manager of degrade d whose breaker has seen no
// outage yet, each under a context from ctxFn; it returns the longest a
// check took and fails the test on any error or undegraded decision.
func outageStart(t *testing.T, d bucketgrid.Degrade, checks int, ctxFn func() (context.Context, context.CancelFunc)) time.Duration {
	t.Helper()
	c := clock.NewFake(time.Unix(1_800_000_000, 0))
	store := &outageStore{Store: memstore.New(memstore.WithClock(c))}
	store.mode.Store(storeHangs)
	m := bucketgrid.NewManager(cas.New(store, cas.WithClock(c)), bucketgrid.WithClock(c), bucketgrid.WithDegrade(d))
	defer m.Close()
	took := make([]time.Duration, checks)
	var wg sync.WaitGroup
	for i := range checks {
		wg.Go(func() {
			ctx, cancel := ctxFn()
			defer cancel()
			start := time.Now()
			_, share, err := tryConsume(ctx, m.Bucket("k", nine), 1)
			took[i] = time.Since(start)
			if err != nil || share == 0 {
				t.Errorf("check %d at the outage's start: %v, share %d; want a local decision", i, err, share)
			}
		})
	}
	wg.Wait()
	return maxOf(took)
}

// maxOf returns the largest of ds.
func maxOf(ds []time.Duration) time.Duration {
	m := ds[0]
	for _, d := range ds[1:] {
		m = max(m, d)
	}
	return m
}

// envoyCall is a check's context as the service gets it behind a default
// Envoy: the filter's timeout as the call's deadline (grpc-timeout).
func envoyCall() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), envoyTimeout)
}

func TestDegradeOutageStartWithinEnvoysTimeout(t *testing.T) {
	// The first checks of an outage, all waiting on the store when it
	// hangs, under Envoy's deadline, are decided within it with the default
	// Degrade: behind a default Envoy none passes unlimited. A loaded
	// machine may delay a goroutine's wake-up past the bound: a trial that
	// misses it is tried again, up to 10 times, and the test fails only
	// when none makes it (before, every check waited for the deadline and
	// failed with its error, which outageStart reports).
	var worst []time.Duration
	for trial := range 10 {
		w := outageStart(t, bucketgrid.Degrade{Instances: func() int { return 3 }}, 16, envoyCall)
		worst = append(worst, w)
		if w <= envoyTimeout {
			t.Logf("trial %d: the slowest of 16 checks at the outage's start took %v (trials %v)", trial, w, worst)
			return
		}
	}
	t.Fatalf("the slowest check at an outage's start took %v in each of 10 trials, want ≤ %v in one", worst, envoyTimeout)
}

func TestDegradeDecidesBeforeCallersDeadline(t *testing.T) {
	// A caller whose deadline is nearer than Degrade.Timeout gets a local
	// decision, not its deadline's error: the wait for the store ends
	// before the deadline does. Judged by outcome, not time, so a loaded
	// machine cannot fail it (a check woken after the deadline is decided
	// locally all the same). Without a deadline, Timeout bounds the wait.
	for _, timeout := range []time.Duration{0, time.Second} {
		outageStart(t, bucketgrid.Degrade{Instances: func() int { return 3 }, Timeout: timeout}, 16, envoyCall)
	}
	outageStart(t, bucketgrid.Degrade{Instances: func() int { return 3 }, Timeout: time.Millisecond}, 16,
		func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) })
}
