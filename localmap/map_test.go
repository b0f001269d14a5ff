package localmap

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/core"
)

// perClient is a typical Spring Boot plan: 10 requests per minute,
// refilled intervally.
func perClient(string) (core.Config, error) {
	return core.NewConfig(core.Intervally(10, 10, time.Minute))
}

var t0 = time.Date(2026, 11, 30, 16, 20, 0, 0, time.UTC)

func newTestMap(t *testing.T, opts ...Option) (*Map, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(t0)
	return New(perClient, append([]Option{WithClock(clk)}, opts...)...), clk
}

func available(t *testing.T, l *bucketgrid.Local) int64 {
	t.Helper()
	n, err := l.AvailableTokens(context.Background())
	if err != nil {
		t.Fatalf("AvailableTokens: %v", err)
	}
	return n
}

func TestMapPerClient(t *testing.T) {
	ctx := context.Background()
	m, clk := newTestMap(t)
	for i := range 10 {
		if ok, err := m.TryConsume(ctx, "10.0.0.1", 1); !ok || err != nil {
			t.Fatalf("request %d of client A = %v, %v", i+1, ok, err)
		}
	}
	p, err := m.TryConsumeAndReturnRemaining(ctx, "10.0.0.1", 1)
	if err != nil || p.Consumed || p.WaitForRefill != time.Minute {
		t.Fatalf("11th request of client A = %+v, %v; want a rejection with a 1m wait", p, err)
	}
	// every client has its own bucket (a naive limiter's shared-bucket bug)
	p, _ = m.TryConsumeAndReturnRemaining(ctx, "10.0.0.2", 1)
	if !p.Consumed || p.Remaining != 9 {
		t.Fatalf("client B = %+v, want consumed with 9 remaining", p)
	}
	a1, _ := m.Bucket("10.0.0.1")
	a2, _ := m.Bucket("10.0.0.1")
	if a1 != a2 {
		t.Fatal("two lookups of a key gave different buckets")
	}
	clk.Advance(time.Minute)
	if ok, _ := a1.TryConsume(ctx, 10); !ok {
		t.Fatal("client A not refilled after a minute")
	}
	if m.Len() != 2 {
		t.Fatalf("Len = %d, want 2", m.Len())
	}
	m.Remove("10.0.0.1")
	m.Remove("absent")
	if m.Len() != 1 {
		t.Fatalf("Len after Remove = %d, want 1", m.Len())
	}
	if b, _ := m.Bucket("10.0.0.1"); b == a1 || available(t, b) != 10 {
		t.Fatal("a removed key must get a new, full bucket")
	}
	if _, err := m.TryConsume(ctx, "x", 0); !errors.Is(err, bucketgrid.ErrTokens) {
		t.Fatalf("TryConsume(0) = %v, want bucketgrid.ErrTokens", err)
	}
	if _, err := m.TryConsumeAndReturnRemaining(ctx, "x", -1); !errors.Is(err, bucketgrid.ErrTokens) {
		t.Fatalf("TryConsumeAndReturnRemaining(-1) = %v, want bucketgrid.ErrTokens", err)
	}
}

func TestMapConfigErrors(t *testing.T) {
	errPlan := errors.New("no plan")
	m := New(func(key string) (core.Config, error) {
		switch key {
		case "unknown":
			return core.Config{}, errPlan
		case "invalid":
			return core.Config{Bandwidths: []core.Bandwidth{core.Greedy(0, 1, time.Second)}}, nil
		case "aligned":
			return core.NewConfig(core.IntervallyAligned(10, 10, time.Hour, t0))
		case "two":
			return core.NewConfig(core.Greedy(10, 10, time.Second), core.Greedy(100, 100, time.Hour))
		}
		return perClient(key)
	})
	if _, err := m.Bucket("unknown"); !errors.Is(err, errPlan) {
		t.Fatalf("configFor error: %v", err)
	}
	if _, err := m.Bucket("invalid"); !errors.Is(err, core.ErrCapacity) {
		t.Fatalf("invalid configuration: %v", err)
	}
	if _, err := m.TryConsume(context.Background(), "aligned", 1); !errors.Is(err, core.ErrNeedsWallClock) {
		t.Fatalf("aligned on the monotonic clock: %v", err)
	}
	if m.Len() != 0 {
		t.Fatalf("failed lookups stored %d buckets", m.Len())
	}
	b, err := m.Bucket("two")
	if err != nil {
		t.Fatal(err)
	}
	if ok, _ := b.TryConsume(context.Background(), 11); ok {
		t.Fatal("a two-bandwidth bucket ignored its smaller capacity")
	}
	if _, err := New(nil).Bucket("k"); err == nil {
		t.Fatal("a map without a configuration function must fail")
	}
}

func TestMapIdleExpiry(t *testing.T) {
	ctx := context.Background()
	m, clk := newTestMap(t, WithIdleTimeout(10*time.Minute))
	m.TryConsume(ctx, "a", 10)
	first, _ := m.Bucket("a")
	clk.Advance(10*time.Minute - 1)
	if b, _ := m.Bucket("a"); b != first {
		t.Fatal("expired 1ns before the idle timeout")
	}
	// the lookup above renewed it
	clk.Advance(10*time.Minute - 1)
	if b, _ := m.Bucket("a"); b != first {
		t.Fatal("a lookup did not renew the idle timer")
	}
	clk.Advance(10 * time.Minute)
	if b, _ := m.Bucket("a"); b == first || m.Len() != 1 {
		t.Fatalf("after idling out: same bucket %v, Len %d", b == first, m.Len())
	}

	m.Bucket("b")
	m.Bucket("c")
	clk.Advance(5 * time.Minute)
	m.Bucket("c")
	clk.Advance(5 * time.Minute)
	if n := m.Sweep(); n != 2 || m.Len() != 1 {
		t.Fatalf("Sweep dropped %d, Len %d; want 2 dropped and c kept", n, m.Len())
	}
	if n := New(perClient).Sweep(); n != 0 {
		t.Fatal("Sweep without an idle timeout dropped buckets")
	}
}

func TestMapEvictsLeastRecentlyUsed(t *testing.T) {
	// 16 entries fit one shard, and the eviction sample covers it all: exact
	// LRU.
	m, clk := newTestMap(t, WithMaxEntries(16))
	for i := range 16 {
		m.Bucket(strconv.Itoa(i))
		clk.Advance(time.Second)
	}
	m.Bucket("0") // 0 is now the most recent, 1 the least
	clk.Advance(time.Second)
	m.Bucket("2")
	m.Bucket("new")
	if m.Len() != 16 {
		t.Fatalf("Len = %d, want the bound 16", m.Len())
	}
	m.shards[0].mu.Lock()
	var keys []string
	for _, sl := range slotsOf(&m.shards[0]) {
		keys = append(keys, sl.e.key)
	}
	m.shards[0].mu.Unlock()
	for _, k := range keys {
		if k == "1" {
			t.Fatalf("the least recently used key survived: %v", keys)
		}
	}

	// idle entries go first, all of those the sample sees
	mi, clk2 := newTestMap(t, WithMaxEntries(16), WithIdleTimeout(time.Minute))
	for i := range 16 {
		mi.Bucket(strconv.Itoa(i))
	}
	clk2.Advance(time.Minute)
	mi.Bucket("fresh")
	if mi.Len() != 1 {
		t.Fatalf("Len = %d, want 1: every idle entry dropped on insertion", mi.Len())
	}
}

func TestMapBoundedUnderMillionKeys(t *testing.T) {
	n := 1_000_000
	if testing.Short() || raceEnabled() {
		n = 200_000 // still 40 times the bound; the race detector makes each key cost ~30 µs
	}
	const bound = 5000
	m, clk := newTestMap(t, WithMaxEntries(bound), WithIdleTimeout(time.Hour))
	ctx := context.Background()
	for i := range n {
		if ok, err := m.TryConsume(ctx, "client-"+strconv.Itoa(i), 1); !ok || err != nil {
			t.Fatalf("key %d: %v, %v", i, ok, err)
		}
		if i%50_000 == 0 {
			if l := m.Len(); l > bound {
				t.Fatalf("after %d keys the map holds %d buckets, bound %d", i+1, l, bound)
			}
			clk.Advance(time.Second)
		}
	}
	total := 0
	for i := range m.shards {
		s := &m.shards[i]
		if s.n > m.perShard {
			t.Fatalf("shard %d: n=%d, bound %d", i, s.n, m.perShard)
		}
		checkShard(t, s)
		total += s.n
	}
	if total > bound || total < bound*9/10 {
		t.Fatalf("the map holds %d buckets after %d keys; want at most %d and most of it used", total, n, bound)
	}
}

type slotView struct {
	i int
	h uint64
	e *mapEntry
}

// slotsOf returns the occupied slots of s.
func slotsOf(s *mapShard) []slotView {
	t := s.tab.Load()
	if t == nil {
		return nil
	}
	var out []slotView
	for i := range t.slots {
		if e := t.slots[i].e.Load(); e != nil {
			out = append(out, slotView{i, t.slots[i].h.Load(), e})
		}
	}
	return out
}

// raceEnabled reports whether the test binary was built with -race.
func raceEnabled() bool {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "-race" {
				return s.Value == "true"
			}
		}
	}
	return false
}

func countEntries(s *mapShard) int { return len(slotsOf(s)) }

// checkShard verifies the table invariants: every entry is reachable from
// its home slot without crossing a free slot, and the count is right.
func checkShard(t *testing.T, s *mapShard) {
	t.Helper()
	size := 0
	if tab := s.tab.Load(); tab != nil {
		size = len(tab.slots)
	}
	if s.n != countEntries(s) || (size > 0 && 16*s.n > 13*size) {
		t.Fatalf("shard holds %d entries, counts %d, in %d slots", countEntries(s), s.n, size)
	}
	for _, sl := range slotsOf(s) {
		if s.find(sl.h, sl.e.key) != sl.i || s.lookup(sl.h, sl.e.key) != sl.e {
			t.Fatalf("entry %q in slot %d is not found by its hash", sl.e.key, sl.i)
		}
	}
}

func TestMapHashCollisions(t *testing.T) {
	// Keys may share a 64-bit hash, and hashes share home slots: drive the
	// table with forced hashes and check it against a plain map after every
	// insertion and deletion.
	m, _ := newTestMap(t, WithMaxEntries(1<<20))
	s := &m.shards[0]
	r := rand.New(rand.NewPCG(1, 2))
	want := map[string]uint64{}
	for step := range 20_000 {
		key := strconv.Itoa(r.IntN(300))
		h := uint64(r.IntN(40)) // few distinct hashes: long runs, many collisions
		if old, ok := want[key]; ok {
			h = old
		}
		if r.IntN(3) == 0 {
			if i := s.find(h, key); i >= 0 {
				s.delete(i)
				delete(want, key)
			} else if _, ok := want[key]; ok {
				t.Fatalf("step %d: %q not found", step, key)
			}
		} else {
			e, err := m.create(s, h, key, 0)
			if err != nil || e.key != key {
				t.Fatalf("create %q: %v", key, err)
			}
			want[key] = h
		}
		if step%97 == 0 {
			checkShard(t, s)
		}
	}
	checkShard(t, s)
	if s.n != len(want) {
		t.Fatalf("table holds %d, want %d", s.n, len(want))
	}
	for key, h := range want {
		if s.find(h, key) < 0 || s.lookup(h, key) == nil {
			t.Fatalf("%q lost", key)
		}
	}
	// a key of the same hash as another is a different bucket
	a, _ := m.create(s, 7, "same-hash-a", 0)
	b, _ := m.create(s, 7, "same-hash-b", 0)
	if a == b {
		t.Fatal("keys sharing a hash share a bucket")
	}
}

func TestMapLongKeys(t *testing.T) {
	m, _ := newTestMap(t)
	long := strings.Repeat("k", 1000)
	buf := []byte(strings.Repeat("x", inlineKey))
	short := string(buf)
	b1, _ := m.Bucket(long)
	b2, _ := m.Bucket(short)
	buf[0] = 'y' // the map must not alias the caller's memory
	if c1, _ := m.Bucket(strings.Repeat("k", 1000)); c1 != b1 {
		t.Fatal("long key not found again")
	}
	if c2, _ := m.Bucket(strings.Repeat("x", inlineKey)); c2 != b2 {
		t.Fatal("inline key not found again")
	}
}

func TestMapContendedExactTotals(t *testing.T) {
	m, _ := newTestMap(t, WithMaxEntries(1000))
	const keys, goroutines, each = 10, 8, 2000
	var wg sync.WaitGroup
	var mu sync.Mutex
	consumed := map[string]int{}
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := map[string]int{}
			for i := range each {
				key := fmt.Sprintf("k%d", (g+i)%keys)
				if ok, _ := m.TryConsume(context.Background(), key, 1); ok {
					local[key]++
				}
			}
			mu.Lock()
			for k, v := range local {
				consumed[k] += v
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	for i := range keys {
		if got := consumed[fmt.Sprintf("k%d", i)]; got != 10 {
			t.Errorf("key k%d: %d consumed, want exactly the capacity 10", i, got)
		}
	}
	// concurrent first lookups of one key all get the same bucket
	var first *bucketgrid.Local
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, err := m.Bucket("shared")
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			if first == nil {
				first = b
			} else if b != first {
				t.Error("concurrent first lookups created two buckets")
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
}

func TestMapShards(t *testing.T) {
	tests := []struct{ max, shards, perShard int }{
		{0, 1, 1},
		{1, 1, 1},
		{16, 1, 16},
		{100, 4, 25},
		{DefaultMaxEntries, 256, 390},
		{1 << 20, 256, 4096},
	}
	for _, tt := range tests {
		m := New(perClient, WithMaxEntries(tt.max))
		if len(m.shards) != tt.shards || m.perShard != tt.perShard {
			t.Errorf("max %d: %d shards of %d, want %d of %d", tt.max, len(m.shards), m.perShard, tt.shards, tt.perShard)
		}
		if len(m.shards)*m.perShard > max(tt.max, 1) {
			t.Errorf("max %d: shards hold up to %d", tt.max, len(m.shards)*m.perShard)
		}
		for i := range 64 {
			if _, err := m.Bucket(strconv.Itoa(i)); err != nil {
				t.Fatal(err)
			}
		}
		if m.Len() > max(tt.max, 1) {
			t.Errorf("max %d: Len %d", tt.max, m.Len())
		}
	}
}

// TestLocalMapConcurrentChurn races lock-free lookups against insertions,
// evictions, growth, removals and sweeps: a lookup must never hand out
// another key's bucket, and the bound must hold throughout.
func TestMapConcurrentChurn(t *testing.T) {
	const bound = 64
	m, clk := newTestMap(t, WithMaxEntries(bound), WithIdleTimeout(time.Minute))
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 9))
			for range 5000 {
				key := "k" + strconv.Itoa(r.IntN(200))
				switch r.IntN(20) {
				case 0:
					m.Remove(key)
				case 1:
					m.Sweep()
				case 2:
					clk.Advance(time.Second)
				default:
					e, _, err := m.get(key)
					if err != nil || e.key != key {
						t.Errorf("lookup of %q returned the bucket of %q (%v)", key, e.key, err)
						return
					}
				}
				if n := m.Len(); n > bound {
					t.Errorf("%d buckets held, bound %d", n, bound)
					return
				}
			}
		}()
	}
	wg.Wait()
	for i := range m.shards {
		checkShard(t, &m.shards[i])
	}
}

// TestMapKeepsConfigurationsApart: buckets share their plan's
// configuration read-only, so replacing one bucket's configuration changes
// no other bucket's, and many plans each keep their own.
func TestMapKeepsConfigurationsApart(t *testing.T) {
	ctx := context.Background()
	m, _ := newTestMap(t)
	a, _ := m.Bucket("a")
	b, _ := m.Bucket("b")
	cfg, _ := core.NewConfig(core.Greedy(1000, 1000, time.Second))
	if err := a.ReplaceConfiguration(ctx, cfg, core.InheritAsIs); err != nil {
		t.Fatal(err)
	}
	capacity := func(l *bucketgrid.Local) int64 {
		d, err := l.Diagnose(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return d.State.Config.Bandwidths[0].Capacity
	}
	if capacity(a) != 1000 || capacity(b) != 10 {
		t.Fatalf("capacities %d and %d, want 1000 and 10: a replacement leaked", capacity(a), capacity(b))
	}
	if c, _ := m.Bucket("c"); capacity(c) != 10 {
		t.Fatal("a replacement leaked into the shared configuration")
	}
	plans := New(func(key string) (core.Config, error) {
		n, _ := strconv.Atoi(key)
		return core.NewConfig(core.Greedy(int64(n+1), 1, time.Second))
	})
	for i := range 30 {
		l, err := plans.Bucket(strconv.Itoa(i))
		if err != nil || available(t, l) != int64(i+1) {
			t.Fatalf("plan %d: %v", i, err)
		}
	}
}

// TestHotPathsDoNotAllocate: looking up an existing bucket and consuming
// from it allocates nothing.
func TestHotPathsDoNotAllocate(t *testing.T) {
	ctx := context.Background()
	cfg, _ := core.NewConfig(core.Greedy(1<<40, 1_000_000, time.Millisecond))
	m := New(func(string) (core.Config, error) { return cfg, nil })
	m.Bucket("client")
	for name, f := range map[string]func(){
		"Map.TryConsume":                   func() { m.TryConsume(ctx, "client", 1) },
		"Map.TryConsumeAndReturnRemaining": func() { m.TryConsumeAndReturnRemaining(ctx, "client", 1) },
		"Map.Bucket":                       func() { m.Bucket("client") },
	} {
		if n := testing.AllocsPerRun(1000, f); n != 0 {
			t.Errorf("%s allocates %.1f times per call", name, n)
		}
	}
}
