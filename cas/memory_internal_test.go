//go:build !wasip1

package cas

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestMemoryBounds churns through ten times as many keys as the memory
// holds, with values of several sizes: it never holds more entries or bytes
// than configured.
func TestMemoryBounds(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     MemoryConfig
		valueSz int
	}{
		{"entries bind", MemoryConfig{Entries: 512, Bytes: 1 << 30, TTL: time.Hour}, 40},
		{"bytes bind", MemoryConfig{Entries: 1 << 20, Bytes: 64 << 10, TTL: time.Hour}, 400},
		{"fewer entries than shards", MemoryConfig{Entries: 3, Bytes: 1 << 20, TTL: time.Hour}, 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMemory(tc.cfg)
			for i := range 10 * min(tc.cfg.Entries, 4096) {
				k := "key-" + strconv.Itoa(i)
				m.put(k, make([]byte, tc.valueSz), Version(i+1), 0, 0)
				if i%97 == 0 {
					m.put(k, make([]byte, tc.valueSz*2), Version(i+2), 0, 0) // grows in place
				}
			}
			entries, bytes := 0, 0
			for i := range m.shards {
				s := &m.shards[i]
				entries += len(s.index)
				bytes += s.bytes
				if s.bytes > s.maxBytes || len(s.index) > s.maxSlots {
					t.Fatalf("shard %d holds %d entries, %d bytes; bounds %d, %d", i, len(s.index), s.bytes, s.maxSlots, s.maxBytes)
				}
				sum := 0
				for k, j := range s.index {
					sl := &s.slots[j]
					if !sl.live || sl.key != k {
						t.Fatalf("index entry %q points at slot %+v", k, sl)
					}
					sum += cost(sl.key, sl.data)
				}
				if sum != s.bytes {
					t.Fatalf("shard %d counts %d bytes, its entries hold %d", i, s.bytes, sum)
				}
			}
			if entries > tc.cfg.Entries+len(m.shards) || bytes > tc.cfg.Bytes {
				t.Fatalf("%d entries, %d bytes; bounds %d, %d", entries, bytes, tc.cfg.Entries, tc.cfg.Bytes)
			}
			if entries == 0 {
				t.Fatal("the memory holds nothing")
			}
		})
	}
}

// TestMemoryKeepsRecentlyUsed: the clock sweep evicts keys not used since
// it last passed before keys that were.
func TestMemoryKeepsRecentlyUsed(t *testing.T) {
	m := newMemory(MemoryConfig{Entries: 4, Bytes: 1 << 20, TTL: time.Hour})
	m.shards = m.shards[:1] // one shard of 4 slots shows the sweep
	m.shards[0].maxSlots = 4
	for i := range 4 {
		m.put("k"+strconv.Itoa(i), []byte("v"), 1, 0, 0)
	}
	if _, _, ok := m.get("k0", 1); !ok { // k0 used
		t.Fatal("k0 not remembered")
	}
	m.put("k4", []byte("v"), 1, 0, 0) // evicts one of k1..k3, not k0
	if _, _, ok := m.get("k0", 1); !ok {
		t.Fatal("the recently used k0 was evicted")
	}
	if _, _, ok := m.get("k4", 1); !ok {
		t.Fatal("the new k4 is not remembered")
	}
	if n := m.len(); n != 4 {
		t.Fatalf("%d entries, want 4", n)
	}
}

func TestMemoryTTL(t *testing.T) {
	m := newMemory(MemoryConfig{TTL: 10 * time.Second})
	m.put("long", []byte("v"), 1, 0, 0)
	m.put("short", []byte("v"), 2, 0, 3*time.Second) // the bucket's own TTL is shorter
	m.put("longer", []byte("v"), 3, 0, time.Minute)  // the memory's is shorter
	for _, tc := range []struct {
		key  string
		at   time.Duration
		want bool
	}{
		{"short", 3*time.Second - 1, true}, {"short", 3 * time.Second, false},
		{"long", 10*time.Second - 1, true}, {"long", 10 * time.Second, false},
		{"longer", 10 * time.Second, false},
	} {
		if _, _, ok := m.get(tc.key, int64(tc.at)); ok != tc.want {
			t.Errorf("%s at %v: remembered %v, want %v", tc.key, tc.at, ok, tc.want)
		}
	}
}

// TestMemoryBacksOffAfterLostRaces: after n writes from memory lost in a
// row, the next 2^n-1 rounds read first; a win trusts memory again.
func TestMemoryBacksOffAfterLostRaces(t *testing.T) {
	m := newMemory(MemoryConfig{})
	m.put("k", []byte("v"), 1, 0, 0)
	pattern := func() string {
		var b strings.Builder
		for range 8 {
			if _, _, ok := m.get("k", 0); ok {
				b.WriteByte('m')
				return b.String()
			}
			b.WriteByte('r')
		}
		return b.String()
	}
	m.lost("k")
	if p := pattern(); p != "rm" {
		t.Fatalf("after 1 lost race: %q, want one read, then memory", p)
	}
	m.lost("k")
	if p := pattern(); p != "rrrm" {
		t.Fatalf("after 2 lost races in a row: %q, want 3 reads, then memory", p)
	}
	m.won("k")
	m.lost("k")
	if p := pattern(); p != "rm" {
		t.Fatalf("after a win and 1 lost race: %q, want one read, then memory", p)
	}
}

func TestMemoryOversizedValueIsNotKept(t *testing.T) {
	m := newMemory(MemoryConfig{Entries: 16, Bytes: 16 * 1024})
	m.put("k", make([]byte, 100), 1, 0, 0)
	m.put("k", make([]byte, 4096), 2, 0, 0) // more than a shard's 1 KiB
	if _, _, ok := m.get("k", 0); ok {
		t.Fatal("a value larger than a shard's bound was kept")
	}
}

// TestMemorySweepsExpired: entries past their TTL go at the next operation
// on their shard after a TTL has passed, not only when their own key is
// read or the bounds need their room: a burst of keys no one asks for
// again does not stay up to the byte bound.
func TestMemorySweepsExpired(t *testing.T) {
	m := newMemory(MemoryConfig{Entries: 1 << 16, Bytes: 16 << 20, TTL: time.Second})
	for i := range 10_000 {
		m.put("burst-"+strconv.Itoa(i), make([]byte, 64), Version(i+1), 0, 0)
	}
	later := int64(2 * time.Second)
	touched := map[*memShard]bool{}
	fresh := 0
	for i := 0; len(touched) < len(m.shards); i++ {
		k := "fresh-" + strconv.Itoa(i)
		touched[m.shard(k)] = true
		m.put(k, make([]byte, 64), Version(1), later, 0)
		fresh++
	}
	if n := m.len(); n != fresh {
		t.Fatalf("after a TTL and an operation on every shard the memory holds %d keys, want the %d fresh ones", n, fresh)
	}
	bytes := 0
	for i := range m.shards {
		bytes += m.shards[i].bytes
	}
	if most := fresh * cost("fresh-"+strconv.Itoa(fresh), make([]byte, 64)); bytes > most {
		t.Fatalf("the memory counts %d bytes for %d fresh keys, want at most %d", bytes, fresh, most)
	}
}
