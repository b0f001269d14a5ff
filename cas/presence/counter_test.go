package presence_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/cas/memstore"
	"github.com/bucketgrid/bucketgrid/cas/presence"
	"github.com/bucketgrid/bucketgrid/clock"
)

const ttl = 8 * time.Second

// flaky is a store that fails every call while down.
type flaky struct {
	cas.Store // an interface: the inner store's Batcher is hidden unless batch is set
	down      atomic.Bool
}

var errDown = errors.New("store down")

func (s *flaky) Get(ctx context.Context, k string) ([]byte, cas.Version, bool, error) {
	if s.down.Load() {
		return nil, 0, false, errDown
	}
	return s.Store.Get(ctx, k)
}

func (s *flaky) Insert(ctx context.Context, k string, d []byte, ttl time.Duration) (bool, error) {
	if s.down.Load() {
		return false, errDown
	}
	return s.Store.Insert(ctx, k, d, ttl)
}

func (s *flaky) Replace(ctx context.Context, k string, d []byte, v cas.Version, ttl time.Duration) (bool, error) {
	if s.down.Load() {
		return false, errDown
	}
	return s.Store.Replace(ctx, k, d, v, ttl)
}

// fixture is a memstore on a fake clock and counters sharing it.
type fixture struct {
	t     *testing.T
	clock *clock.Fake
	mem   *memstore.Store
	store *flaky
}

func newFixture(t *testing.T) *fixture {
	c := clock.NewFake(time.Unix(1_800_000_000, 0))
	mem := memstore.New(memstore.WithClock(c))
	return &fixture{t: t, clock: c, mem: mem, store: &flaky{Store: mem}}
}

func (f *fixture) counter(cfg presence.Config) *presence.Counter {
	f.t.Helper()
	if cfg.TTL == 0 {
		cfg.TTL = ttl
	}
	cfg.Clock = f.clock
	c, err := presence.New(f.store, cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	return c
}

func (f *fixture) counters(n int, cfg presence.Config) []*presence.Counter {
	cs := make([]*presence.Counter, n)
	for i := range cs {
		cs[i] = f.counter(cfg)
	}
	return cs
}

// refresh refreshes cs in turn, failing the test on an error.
func (f *fixture) refresh(cs ...*presence.Counter) {
	f.t.Helper()
	for _, c := range cs {
		if err := c.Refresh(context.Background()); err != nil {
			f.t.Fatal(err)
		}
	}
}

// want checks every counter's count.
func want(t *testing.T, what string, n int, cs ...*presence.Counter) {
	t.Helper()
	for i, c := range cs {
		if got := c.LiveInstances(); got != n {
			t.Fatalf("%s: counter %d counts %d, want %d", what, i, got, n)
		}
	}
}

func TestCountersCountEachOther(t *testing.T) {
	f := newFixture(t)
	cs := f.counters(3, presence.Config{})
	want(t, "before any refresh", 1, cs...)
	f.refresh(cs...)
	f.refresh(cs...) // the first ones refreshed before the last had a record
	want(t, "three refreshed", 3, cs...)
	// c[2] stops (a crash: no withdrawal); the others go on refreshing
	// every TTL/4, and count it until its record expires
	for range 3 {
		f.clock.Advance(ttl / 4)
		f.refresh(cs[0], cs[1])
	}
	want(t, "3/4 of a TTL after c2's last refresh", 3, cs[0], cs[1])
	f.clock.Advance(ttl / 4)
	f.refresh(cs[0], cs[1])
	want(t, "one TTL after c2's last refresh", 2, cs[0], cs[1])
	// it comes back, and counts the others at its first refresh
	f.refresh(cs[2])
	want(t, "c2 back", 3, cs[2])
	f.refresh(cs[0], cs[1])
	want(t, "c2 back", 3, cs...)
}

func TestWithdrawLeavesTheCountAtOnce(t *testing.T) {
	f := newFixture(t)
	cs := f.counters(2, presence.Config{})
	f.refresh(cs...)
	f.refresh(cs...)
	want(t, "two", 2, cs...)
	if err := cs[1].Withdraw(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(time.Millisecond)
	f.refresh(cs[0])
	want(t, "after a withdrawal", 1, cs[0])
	// the slot it left is free again for a newcomer
	c := f.counter(presence.Config{Slots: 2})
	f.refresh(c, cs[0])
	want(t, "a newcomer in the freed slot", 2, c, cs[0])
}

func TestOutageKeepsTheLastCount(t *testing.T) {
	f := newFixture(t)
	cs := f.counters(3, presence.Config{})
	f.refresh(cs...)
	f.refresh(cs...)
	f.store.down.Store(true)
	// while the store is out no refresh succeeds, and the count is the
	// last one seen, however long the outage; c2 stops meanwhile
	for range 20 {
		f.clock.Advance(ttl / 4)
		for _, c := range cs[:2] {
			if err := c.Refresh(context.Background()); !errors.Is(err, errDown) {
				t.Fatalf("refresh while down: %v, want the outage", err)
			}
		}
	}
	want(t, "five TTLs into the outage", 3, cs[0], cs[1])
	if st := cs[0].Stats(); st.Failed != 20 || st.Refreshed != 2 {
		t.Fatalf("stats %+v, want 2 refreshed and 20 failed", st)
	}
	// back: c2's record is long gone, but for one TTL the others may not
	// have refreshed yet, so the count does not drop
	f.store.down.Store(false)
	f.refresh(cs[0], cs[1])
	want(t, "just after the outage", 3, cs[0], cs[1])
	f.clock.Advance(ttl - ttl/4)
	f.refresh(cs[0], cs[1])
	want(t, "3/4 of a TTL after the outage", 3, cs[0], cs[1])
	f.clock.Advance(ttl / 4)
	f.refresh(cs[0], cs[1])
	want(t, "one TTL after the outage", 2, cs[0], cs[1])
}

func TestStoreLosingRecordsHoldsTheCount(t *testing.T) {
	f := newFixture(t)
	cs := f.counters(3, presence.Config{})
	f.refresh(cs...)
	f.refresh(cs...)
	// the store restarts empty between two refreshes (no error seen)
	for i := range presence.DefaultSlots {
		if err := f.mem.Delete(context.Background(), presence.DefaultPrefix+strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	f.refresh(cs[0]) // finds its own record gone: the others' are too
	want(t, "c0 alone after the loss", 3, cs[0])
	f.refresh(cs[1], cs[2])
	f.refresh(cs[0])
	want(t, "every one back", 3, cs...)
}

func TestFloor(t *testing.T) {
	f := newFixture(t)
	cs := f.counters(2, presence.Config{Floor: 4})
	want(t, "before a refresh", 4, cs...)
	f.refresh(cs...)
	f.refresh(cs...)
	want(t, "two counted, floor 4", 4, cs...)
	more := f.counters(3, presence.Config{Floor: 4})
	f.refresh(more...)
	f.refresh(cs...)
	want(t, "five counted, floor 4", 5, cs...)
}

func TestFullSlotsStillCountTheCounter(t *testing.T) {
	f := newFixture(t)
	cs := f.counters(3, presence.Config{Slots: 2})
	f.refresh(cs...)
	f.refresh(cs...)
	want(t, "in a slot", 2, cs[0], cs[1])
	want(t, "without a slot", 3, cs[2])
}

func TestForeignBytesAreNeitherCountedNorTaken(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if ok, err := f.mem.Insert(ctx, presence.DefaultPrefix+"0", []byte("not a record"), 0); !ok || err != nil {
		t.Fatal(ok, err)
	}
	cs := f.counters(2, presence.Config{})
	f.refresh(cs...)
	f.refresh(cs...)
	want(t, "beside foreign bytes", 2, cs...)
	data, _, _, err := f.mem.Get(ctx, presence.DefaultPrefix+"0")
	if err != nil || string(data) != "not a record" {
		t.Fatalf("slot 0 holds %q (%v), want the foreign bytes untouched", data, err)
	}
}

func TestCountingWithoutBatcher(t *testing.T) {
	// flaky embeds the Store interface, hiding memstore's Batcher; this one
	// passes it through, so both ways of reading the slots are tested
	f := newFixture(t)
	batching := struct {
		*flaky
		cas.Batcher
	}{f.store, f.mem}
	a := f.counter(presence.Config{})
	b, err := presence.New(batching, presence.Config{TTL: ttl, Clock: f.clock})
	if err != nil {
		t.Fatal(err)
	}
	f.refresh(a, b, a)
	want(t, "one reading by Get, one by Batch", 2, a, b)
}

func TestConcurrentNewcomersTakeSlotsOfTheirOwn(t *testing.T) {
	f := newFixture(t)
	cs := f.counters(16, presence.Config{Slots: 16})
	for range 2 {
		var wg sync.WaitGroup
		for _, c := range cs {
			wg.Go(func() {
				if err := c.Refresh(context.Background()); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
	}
	want(t, "16 refreshed at once, twice", 16, cs...)
}

func TestRunRefreshesAndWithdraws(t *testing.T) {
	mem := memstore.New()
	cfg := presence.Config{TTL: time.Minute, Refresh: 5 * time.Millisecond, Timeout: 5 * time.Millisecond}
	a, err := presence.New(mem, cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := presence.New(mem, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	for deadline := time.Now().Add(time.Minute); b.LiveInstances() != 2; time.Sleep(time.Millisecond) {
		if err := b.Refresh(context.Background()); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("b counts %d a minute after a started, want 2", b.LiveInstances())
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v, want nil after withdrawing", err)
	}
	for deadline := time.Now().Add(time.Minute); b.LiveInstances() != 1; time.Sleep(time.Millisecond) {
		if err := b.Refresh(context.Background()); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("b counts %d a minute after a withdrew, want 1", b.LiveInstances())
		}
	}
}

func TestConfigRefusals(t *testing.T) {
	mem := memstore.New()
	for _, tc := range []struct {
		cfg  presence.Config
		want string
	}{
		{presence.Config{Slots: -1}, "Slots -1"},
		{presence.Config{Slots: presence.MaxSlots + 1}, "Slots 4097"},
		{presence.Config{TTL: -time.Second}, "TTL -1s"},
		{presence.Config{TTL: time.Second, Refresh: time.Second}, "Refresh 1s"},
		{presence.Config{Refresh: -time.Second}, "Refresh -1s"},
		{presence.Config{Timeout: time.Hour}, "Timeout 1h0m0s"},
		{presence.Config{Floor: -2}, "Floor -2"},
	} {
		if _, err := presence.New(mem, tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v): %v, want an error naming %q", tc.cfg, err, tc.want)
		}
	}
	if _, err := presence.New(nil, presence.Config{}); err == nil {
		t.Errorf("New(nil store) succeeded")
	}
	if _, err := presence.New(mem, presence.Config{}); err != nil {
		t.Errorf("the zero Config: %v", err)
	}
}
