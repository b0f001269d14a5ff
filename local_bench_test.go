package bucketgrid

import (
	"context"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/core"
	"github.com/sethvargo/go-limiter/memorystore"
	"golang.org/x/time/rate"
)

// The benchmarks compare the local bucket with golang.org/x/time/rate on the
// same limit, so large that neither ever rejects (a burst of 2^31-1 tokens
// refilled at one per nanosecond): both pay for a clock read, a lock and the
// refill arithmetic on every call.

const (
	benchRate  = int64(1e9) // tokens per second: 1 per ns, the finest rate core allows
	benchBurst = math.MaxInt32
)

func benchLocal(b *testing.B) *Local {
	b.Helper()
	cfg, err := core.NewConfig(core.Greedy(benchBurst, benchRate, time.Second))
	if err != nil {
		b.Fatal(err)
	}
	l, err := NewLocal(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// Each comparison is one benchmark with a sub-benchmark per contender, so
// the contenders run back to back. Contended (parallel) figures swing between
// runs: compare them within one run only.

func BenchmarkTryConsume(b *testing.B) {
	ctx := context.Background()
	b.Run("bucketgrid", func(b *testing.B) {
		l := benchLocal(b)
		b.ReportAllocs()
		for b.Loop() {
			if ok, _ := l.TryConsume(ctx, 1); !ok {
				b.Fatal("rejected")
			}
		}
	})
	b.Run("x-time-rate", func(b *testing.B) {
		lim := benchRateLimiter()
		b.ReportAllocs()
		for b.Loop() {
			if !lim.AllowN(time.Now(), 1) {
				b.Fatal("rejected")
			}
		}
	})
}

func BenchmarkTryConsumeParallel(b *testing.B) {
	ctx := context.Background()
	b.Run("bucketgrid", func(b *testing.B) {
		l := benchLocal(b)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if ok, _ := l.TryConsume(ctx, 1); !ok {
					b.Fatal("rejected")
				}
			}
		})
	})
	b.Run("x-time-rate", func(b *testing.B) {
		lim := benchRateLimiter()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if !lim.AllowN(time.Now(), 1) {
					b.Fatal("rejected")
				}
			}
		})
	})
}

func benchRateLimiter() *rate.Limiter {
	return rate.NewLimiter(rate.Limit(benchRate), benchBurst)
}

// The keyed benchmarks take one token per call from 100k per-client buckets
// in round-robin order (every bucket exists before timing starts), against
// github.com/sethvargo/go-limiter's memory store on the same keys. As in a
// server, where each request brings its key as a new string, lookups use
// copies of the keys the buckets were created with.

const benchKeys = 100_000

// benchKeyNames returns the keys to create buckets with and equal copies to
// look them up with.
func benchKeyNames() (create, lookup []string) {
	create = make([]string, benchKeys)
	lookup = make([]string, benchKeys)
	for i := range create {
		create[i] = "client-" + strconv.Itoa(i)
	}
	for i := range lookup {
		lookup[i] = strings.Clone(create[i])
	}
	return create, lookup
}

func benchLocalMap(b *testing.B, keys []string) *LocalMap {
	b.Helper()
	cfg, err := core.NewConfig(core.Greedy(benchBurst, benchRate, time.Second))
	if err != nil {
		b.Fatal(err)
	}
	m := NewLocalMap(func(string) (core.Config, error) { return cfg, nil },
		WithMaxEntries(4*benchKeys), WithIdleTimeout(time.Hour))
	for _, k := range keys {
		if _, err := m.Bucket(k); err != nil {
			b.Fatal(err)
		}
	}
	return m
}

type keyedStore interface {
	Take(context.Context, string) (uint64, uint64, uint64, bool, error)
	Close(context.Context) error
}

func benchGoLimiter(b *testing.B, keys []string) keyedStore {
	b.Helper()
	// a day-long interval: go-limiter never refills within a run, so it
	// never rejects
	store, err := memorystore.New(&memorystore.Config{Tokens: 1 << 40, Interval: 24 * time.Hour,
		InitialAlloc: benchKeys})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for _, k := range keys {
		if _, _, _, ok, err := store.Take(ctx, k); !ok || err != nil {
			b.Fatal("go-limiter rejected", err)
		}
	}
	b.Cleanup(func() { store.Close(ctx) })
	return store
}

func BenchmarkKeyed100k(b *testing.B) {
	create, keys := benchKeyNames()
	ctx := context.Background()
	b.Run("bucketgrid", func(b *testing.B) {
		m := benchLocalMap(b, create)
		i := 0
		b.ReportAllocs()
		for b.Loop() {
			if ok, _ := m.TryConsume(ctx, keys[i], 1); !ok {
				b.Fatal("rejected")
			}
			if i++; i == len(keys) {
				i = 0
			}
		}
	})
	b.Run("go-limiter", func(b *testing.B) {
		store := benchGoLimiter(b, create)
		i := 0
		b.ReportAllocs()
		for b.Loop() {
			if _, _, _, ok, _ := store.Take(ctx, keys[i]); !ok {
				b.Fatal("rejected")
			}
			if i++; i == len(keys) {
				i = 0
			}
		}
	})
}

func BenchmarkKeyed100kParallel(b *testing.B) {
	create, keys := benchKeyNames()
	ctx := context.Background()
	// each goroutine walks the keys round-robin from its own offset
	walk := func(b *testing.B, take func(key string) bool) {
		var start atomic.Int64
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			i := int(start.Add(benchKeys/8)) % benchKeys
			for pb.Next() {
				if !take(keys[i]) {
					b.Fatal("rejected")
				}
				if i++; i == len(keys) {
					i = 0
				}
			}
		})
	}
	b.Run("bucketgrid", func(b *testing.B) {
		m := benchLocalMap(b, create)
		walk(b, func(key string) bool { ok, _ := m.TryConsume(ctx, key, 1); return ok })
	})
	b.Run("go-limiter", func(b *testing.B) {
		store := benchGoLimiter(b, create)
		walk(b, func(key string) bool { _, _, _, ok, _ := store.Take(ctx, key); return ok })
	})
}
