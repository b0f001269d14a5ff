//go:build !wasip1

package cas

import (
	"hash/maphash"
	"sync"
	"time"
)

// memoryShards is the number of independently locked parts of a memory;
// fewer when Entries is smaller.
const memoryShards = 16

// memory remembers, per key, the value and version the executor last read
// or wrote. It is split into shards by a hash of the key; each shard is a
// map into a fixed number of slots, evicted by the clock algorithm (a
// second-chance sweep over the slots, which keeps recently used keys). It
// never decides anything: the executor writes from it with a
// compare-and-swap, which the store refuses when the key changed.
type memory struct {
	seed   maphash.Seed
	ttl    int64
	shards []memShard
}

type memShard struct {
	mu       sync.Mutex
	index    map[string]int32 // key → slot
	slots    []memSlot
	free     []int32 // dead slots to reuse
	hand     int     // the clock hand
	bytes    int
	maxSlots int
	maxBytes int
	ttl      int64 // the memory's TTL: the time between sweeps
	sweepAt  int64 // executor clock; the next operation from then on sweeps
}

type memSlot struct {
	key     string
	data    []byte
	ver     Version
	expires int64 // executor clock
	live    bool
	ref     bool  // used since the hand last passed
	misses  uint8 // writes from memory lost in a row
	skip    uint8 // rounds to read first before writing from memory again
}

func newMemory(c MemoryConfig) *memory {
	c = c.withDefaults()
	n := min(memoryShards, c.Entries)
	m := &memory{seed: maphash.MakeSeed(), ttl: int64(c.TTL), shards: make([]memShard, n)}
	for i := range m.shards {
		m.shards[i] = memShard{
			index:    make(map[string]int32),
			maxSlots: (c.Entries + n - 1) / n,
			maxBytes: c.Bytes / n,
			ttl:      int64(c.TTL),
		}
	}
	return m
}

func (m *memory) shard(key string) *memShard {
	return &m.shards[maphash.String(m.seed, key)%uint64(len(m.shards))]
}

// get returns key's remembered value and version, unless it has expired by
// now or the key is in a spell of reading first after lost races.
func (m *memory) get(key string, now int64) (data []byte, ver Version, ok bool) {
	s := m.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweep(now)
	i, found := s.index[key]
	if !found {
		return nil, 0, false
	}
	sl := &s.slots[i]
	if now >= sl.expires {
		s.remove(i)
		return nil, 0, false
	}
	sl.ref = true
	if sl.skip > 0 {
		sl.skip--
		return nil, 0, false
	}
	return sl.data, sl.ver, true
}

// put remembers data and ver for key until now plus the memory's TTL, or
// plus ttl when that is shorter and positive. data must never change
// afterwards.
func (m *memory) put(key string, data []byte, ver Version, now int64, ttl time.Duration) {
	life := m.ttl
	if ttl > 0 && int64(ttl) < life {
		life = int64(ttl)
	}
	s := m.shard(key)
	s.mu.Lock()
	s.sweep(now)
	s.put(key, data, ver, now+life)
	s.mu.Unlock()
}

// won records that a write from memory won: key's memory is trusted again.
func (m *memory) won(key string) {
	s := m.shard(key)
	s.mu.Lock()
	if i, ok := s.index[key]; ok {
		s.slots[i].misses = 0
	}
	s.mu.Unlock()
}

// lost records that a write from memory lost the race: another process
// writes key too. The next 2^n-1 rounds on key (n lost in a row, at most
// 5) read first, so a key written by several processes costs few wasted
// writes, and the memory is tried again now and then.
func (m *memory) lost(key string) {
	s := m.shard(key)
	s.mu.Lock()
	if i, ok := s.index[key]; ok {
		sl := &s.slots[i]
		sl.misses = min(sl.misses+1, 5)
		sl.skip = 1<<sl.misses - 1
	}
	s.mu.Unlock()
}

// forget drops key.
func (m *memory) forget(key string) {
	s := m.shard(key)
	s.mu.Lock()
	if i, ok := s.index[key]; ok {
		s.remove(i)
	}
	s.mu.Unlock()
}

// len returns the number of keys remembered, expired ones included.
func (m *memory) len() int {
	n := 0
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		n += len(s.index)
		s.mu.Unlock()
	}
	return n
}

func cost(key string, data []byte) int { return len(key) + cap(data) + EntryOverhead }

// put stores an entry, evicting others to stay within the bounds; s.mu
// held. An entry larger than the whole shard's byte bound is not kept.
func (s *memShard) put(key string, data []byte, ver Version, expires int64) {
	c := cost(key, data)
	i, found := s.index[key]
	if c > s.maxBytes {
		if found {
			s.remove(i)
		}
		return
	}
	if found {
		sl := &s.slots[i]
		s.bytes += c - cost(sl.key, sl.data)
		sl.data, sl.ver, sl.expires = data, ver, expires
		for s.bytes > s.maxBytes && s.evict(i) {
		}
		return
	}
	for s.bytes+c > s.maxBytes || (len(s.free) == 0 && len(s.slots) >= s.maxSlots) {
		if !s.evict(-1) {
			return
		}
	}
	if n := len(s.free); n > 0 {
		i = s.free[n-1]
		s.free = s.free[:n-1]
	} else {
		i = int32(len(s.slots))
		s.slots = append(s.slots, memSlot{})
	}
	s.slots[i] = memSlot{key: key, data: data, ver: ver, expires: expires, live: true}
	s.index[key] = i
	s.bytes += c
}

// evict removes one live entry other than slot keep, the first the clock
// hand finds unused since it last passed; it reports false when there is
// none; s.mu held.
func (s *memShard) evict(keep int32) bool {
	for range 2*len(s.slots) + 1 {
		if len(s.slots) == 0 {
			return false
		}
		i := int32(s.hand % len(s.slots))
		s.hand = int(i) + 1
		sl := &s.slots[i]
		switch {
		case !sl.live || i == keep:
		case sl.ref:
			sl.ref = false
		default:
			s.remove(i)
			return true
		}
	}
	return false
}

// sweep removes the expired entries once a TTL has passed since the last
// sweep; s.mu held. Without it, keys no one asks for again would stay until
// the bounds need their room: up to the whole byte bound after a burst. A
// sweep walks every slot, once a TTL per shard, so its cost is shared by
// the operations of a TTL; a shard no operation reaches is not swept.
func (s *memShard) sweep(now int64) {
	if now < s.sweepAt {
		return
	}
	s.sweepAt = now + s.ttl
	for i := range s.slots {
		if sl := &s.slots[i]; sl.live && now >= sl.expires {
			s.remove(int32(i))
		}
	}
}

// remove frees slot i; s.mu held.
func (s *memShard) remove(i int32) {
	sl := &s.slots[i]
	s.bytes -= cost(sl.key, sl.data)
	delete(s.index, sl.key)
	*sl = memSlot{}
	s.free = append(s.free, i)
}
