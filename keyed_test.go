package bucketgrid

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/core"
)

// perClient is the Spring Boot article's plan: 10 requests per minute,
// refilled intervally.
func perClient(string) (core.Config, error) {
	return core.NewConfig(core.Intervally(10, 10, time.Minute))
}

func newTestMap(t *testing.T, opts ...LocalMapOption) (*LocalMap, *FakeClock) {
	t.Helper()
	clk := NewFakeClock(t0)
	return NewLocalMap(perClient, append([]LocalMapOption{WithMapClock(clk)}, opts...)...), clk
}

func TestLocalMapPerClient(t *testing.T) {
	ctx := context.Background()
	m, clk := newTestMap(t)
	for i := range 10 {
		if ok, err := m.TryConsume(ctx, "10.0.0.1", 1); !ok || err != nil {
			t.Fatalf("request %d of client A = %v, %v", i+1, ok, err)
		}
	}
	p, err := m.TryConsumeAndReturnRemaining(ctx, "10.0.0.1", 1)
	if err != nil || p.Consumed || p.NanosToWaitForRefill != int64(time.Minute) {
		t.Fatalf("11th request of client A = %+v, %v; want a rejection with a 1m wait", p, err)
	}
	// every client has its own bucket (the article's shared-bucket bug)
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
	if _, err := m.TryConsume(ctx, "x", 0); !errors.Is(err, ErrTokens) {
		t.Fatalf("TryConsume(0) = %v, want ErrTokens", err)
	}
	if _, err := m.TryConsumeAndReturnRemaining(ctx, "x", -1); !errors.Is(err, ErrTokens) {
		t.Fatalf("TryConsumeAndReturnRemaining(-1) = %v, want ErrTokens", err)
	}
}

func TestLocalMapConfigErrors(t *testing.T) {
	errPlan := errors.New("no plan")
	m := NewLocalMap(func(key string) (core.Config, error) {
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
	if _, err := NewLocalMap(nil).Bucket("k"); err == nil {
		t.Fatal("a map without a configuration function must fail")
	}
}

func TestLocalMapIdleExpiry(t *testing.T) {
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
	if n := NewLocalMap(perClient).Sweep(); n != 0 {
		t.Fatal("Sweep without an idle timeout dropped buckets")
	}
}

func TestLocalMapEvictsLeastRecentlyUsed(t *testing.T) {
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
	for _, e := range m.shards[0].m {
		keys = append(keys, e.key)
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

func TestLocalMapBoundedUnderMillionKeys(t *testing.T) {
	n := 1_000_000
	if testing.Short() {
		n = 100_000
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
		if s.n > m.perShard || s.n != countEntries(s) {
			t.Fatalf("shard %d: n=%d, counted %d, bound %d", i, s.n, countEntries(s), m.perShard)
		}
		total += s.n
	}
	if total > bound || total < bound*9/10 {
		t.Fatalf("the map holds %d buckets after %d keys; want at most %d and most of it used", total, n, bound)
	}
}

func countEntries(s *mapShard) int {
	n := 0
	for _, e := range s.m {
		for ; e != nil; e = e.next {
			n++
		}
	}
	return n
}

func TestLocalMapHashCollisions(t *testing.T) {
	// keys sharing a 64-bit hash are chained; drive create and remove with a
	// forced hash.
	m, _ := newTestMap(t, WithMaxEntries(4))
	s := &m.shards[0]
	const h = 42
	a, _ := m.create(s, h, "a", 0)
	b, _ := m.create(s, h, "b", 0)
	c, _ := m.create(s, h, "c", 0)
	if a == b || s.n != 3 || countEntries(s) != 3 {
		t.Fatalf("chain: n=%d counted %d", s.n, countEntries(s))
	}
	if again, _ := m.create(s, h, "b", 1); again != b {
		t.Fatal("a chained key was created twice")
	}
	s.remove(h, b)
	if s.n != 2 || s.m[h] != c || c.next != a || a.next != nil {
		t.Fatal("removing the middle of a chain broke it")
	}
	s.remove(h, c)
	s.remove(h, a)
	if len(s.m) != 0 || s.n != 0 {
		t.Fatal("removing a whole chain left entries")
	}
}

func TestLocalMapContendedExactTotals(t *testing.T) {
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
	var first *Local
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

func TestLocalMapShards(t *testing.T) {
	tests := []struct{ max, shards, perShard int }{
		{0, 1, 1},
		{1, 1, 1},
		{16, 1, 16},
		{100, 4, 25},
		{DefaultMaxEntries, 256, 390},
		{1 << 20, 256, 4096},
	}
	for _, tt := range tests {
		m := NewLocalMap(perClient, WithMaxEntries(tt.max))
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
