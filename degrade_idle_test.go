package bucketgrid_test

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/cas/memstore"
	"github.com/bucketgrid/bucketgrid/clock"
)

func TestDegradeIdleInstanceCharges(t *testing.T) {
	// An instance that consumed locally during an outage and then gets no
	// request still charges its consumption once the backend is back,
	// within one Probe of the Manager's clock and the sweep's Timeout: or
	// the other instances would admit those tokens a second time.
	tests := []struct {
		name     string
		failures int   // the failures that open a breaker: 2 does, 1000 never does
		before   int64 // tokens taken from the real bucket before the outage
		want     int64 // tokens charged: what was consumed locally, at most what the bucket held
	}{
		{"breaker open", 2, 0, 3},
		{"breaker open, bucket nearly empty", 2, 8, 1},
		{"breaker still closed", 1000, 0, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			c := clock.NewFake(time.Unix(1_800_000_000, 0))
			store := &outageStore{Store: memstore.New(memstore.WithClock(c))}
			exec := cas.New(store, cas.WithClock(c))
			other := bucketgrid.NewManager(exec, bucketgrid.WithClock(c)) // another instance, without degrade
			base := runtime.NumGoroutine()
			m := bucketgrid.NewManager(exec, bucketgrid.WithClock(c), bucketgrid.WithDegrade(bucketgrid.Degrade{
				Instances: func() int { return 3 }, Timeout: storeWait}.Tuned(tt.failures, probe, 0)))
			defer m.Close()
			if tt.before > 0 {
				if ok, err := other.Bucket("k", nine).TryConsume(ctx, tt.before); !ok || err != nil {
					t.Fatalf("consume %d before the outage: %v %v", tt.before, ok, err)
				}
			}
			store.mode.Store(storeDown)
			if got := consumeAll(t, m.Bucket("k", nine), true); got != 3 {
				t.Fatalf("admitted %d while down, want the share's 3", got)
			}
			// idle from here on: no request reaches m
			store.mode.Store(storeUp)
			waitFor(t, "the prober's timer", func() bool { return c.Timers() > 0 })
			c.Advance(probe)
			waitFor(t, "the charge", func() bool { st := m.Stats(); return st.Charged+st.ChargeFailed > 0 })
			if st := m.Stats(); st.Charged != tt.want || st.ChargeFailed != 0 || st.OpenBreakers != 0 {
				t.Fatalf("stats %+v, want %d charged, none failed, no breaker open", st, tt.want)
			}
			if got, err := other.Bucket("k", nine).AvailableTokens(ctx); got != 9-tt.before-tt.want || err != nil {
				t.Fatalf("real bucket holds %d (%v), want %d", got, err, 9-tt.before-tt.want)
			}
			// nothing pending: the prober ends at its next pass, without Close
			waitFor(t, "the prober's next timer", func() bool { return c.Timers() > 0 })
			c.Advance(probe)
			waitFor(t, "the prober to end", func() bool { return c.Timers() == 0 && runtime.NumGoroutine() <= base })
		})
	}
}

func TestDegradeCloseStopsProber(t *testing.T) {
	// A Manager whose backend stays out probes until closed, then stops.
	c := clock.NewFake(time.Unix(1_800_000_000, 0))
	store := &outageStore{Store: memstore.New(memstore.WithClock(c))}
	base := runtime.NumGoroutine()
	m := bucketgrid.NewManager(cas.New(store, cas.WithClock(c)), bucketgrid.WithClock(c),
		bucketgrid.WithDegrade(bucketgrid.Degrade{Instances: func() int { return 3 },
			Timeout: storeWait}.Tuned(2, probe, 0)))
	store.mode.Store(storeDown)
	h := m.Bucket("k", nine)
	consumeAll(t, h, true)
	for range 3 { // the store stays down: each pass probes and goes on
		calls := store.calls.Load()
		waitFor(t, "the prober's timer", func() bool { return c.Timers() > 0 })
		c.Advance(probe)
		waitFor(t, "a background probe", func() bool { return store.calls.Load() > calls })
	}
	if err := m.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	waitFor(t, "the prober to end", func() bool { return c.Timers() == 0 && runtime.NumGoroutine() <= base })
	if err := m.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	// still answering after Close, locally while the breaker is open
	if got := consumeAll(t, h, true); got != 0 {
		t.Fatalf("admitted %d after the share was used up", got)
	}
}

func TestDegradeBackgroundChargeRacesRequests(t *testing.T) {
	// The prober's charge and this instance's requests arriving meanwhile
	// never admit together more than the real bucket held: 9 less the 3
	// consumed locally, whichever charges first (the sweep, or a request
	// carrying the charge ahead of its own operations). Another instance
	// is not held back by this one's charge: until it lands (one Probe and
	// the sweep's Timeout at most) it may take those tokens first, and the
	// charge is then capped at what is left.
	for run := 0; run < 20; run++ {
		ctx := context.Background()
		c := clock.NewFake(time.Unix(1_800_000_000, 0))
		store := &outageStore{Store: memstore.New(memstore.WithClock(c))}
		exec := cas.New(store, cas.WithClock(c))
		m := bucketgrid.NewManager(exec, bucketgrid.WithClock(c), bucketgrid.WithDegrade(bucketgrid.Degrade{
			Instances: func() int { return 3 }, Timeout: storeWait}.Tuned(2, probe, 0)))
		store.mode.Store(storeDown)
		if got := consumeAll(t, m.Bucket("k", nine), true); got != 3 {
			t.Fatalf("admitted %d while down, want 3", got)
		}
		store.mode.Store(storeUp)
		waitFor(t, "the prober's timer", func() bool { return c.Timers() > 0 })
		c.Advance(probe)
		waitFor(t, "the breaker to close", func() bool { return m.Stats().OpenBreakers == 0 })
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				h := m.Bucket("k", nine)
				for {
					ok, err := h.TryConsume(ctx, 1)
					if err != nil {
						t.Errorf("consume: %v", err)
						return
					}
					if !ok {
						return
					}
					admitted.Add(1)
				}
			})
		}
		wg.Wait()
		if got, st := admitted.Load(), m.Stats(); got != 6 || st.Charged != 3 {
			t.Fatalf("run %d: admitted %d after 3 locally from a real bucket of 9, want 6; stats %+v, want 3 charged",
				run, got, st)
		}
		m.Close()
	}
}
