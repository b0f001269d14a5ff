package localmap

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
)

// The keyed benchmarks take one token per call from 100k per-client buckets
// in round-robin order (every bucket exists before timing starts), against
// github.com/sethvargo/go-limiter's memory store on the same keys. As in a
// server, where each request brings its key as a new string, lookups use
// copies of the keys the buckets were created with.
// The limit is so large that neither ever rejects (a burst of 2^31-1 tokens
// refilled at one per nanosecond).

const (
	benchRate  = int64(1e9) // tokens per second: 1 per ns, the finest rate core allows
	benchBurst = math.MaxInt32
)

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

func benchMap(b *testing.B, keys []string) *Map {
	b.Helper()
	cfg, err := core.NewConfig(core.Greedy(benchBurst, benchRate, time.Second))
	if err != nil {
		b.Fatal(err)
	}
	m := New(func(string) (core.Config, error) { return cfg, nil },
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
		m := benchMap(b, create)
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
		m := benchMap(b, create)
		walk(b, func(key string) bool { ok, _ := m.TryConsume(ctx, key, 1); return ok })
	})
	b.Run("go-limiter", func(b *testing.B) {
		store := benchGoLimiter(b, create)
		walk(b, func(key string) bool { _, _, _, ok, _ := store.Take(ctx, key); return ok })
	})
}
