package localmap

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math/bits"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/core"
)

// Map is a bounded, idle-expiring map of local buckets, one per client
// key: the in-process per-client limiter (what a Spring Boot service does
// with a Caffeine cache of Bucket4j buckets). It is safe for concurrent use;
// looking up an existing bucket takes no lock and does not allocate.
//
// Memory is bounded whatever keys are seen: the map never holds more than
// its maximum number of entries. When a shard of the map is full, inserting
// a key first drops entries idle beyond the idle timeout, then the least
// recently used of a random sample (an approximate LRU, as Redis does). An
// entry idle beyond the timeout is also replaced by a fresh bucket when its
// key is next seen. There is no background goroutine: all expiry is driven
// by the map's clock as keys are used, so a clock.Fake drives it in tests.
//
// Evicting a bucket forgets its state: a client whose bucket was evicted
// starts again with a new one (full, or at the configured initial tokens).
// With an idle timeout longer than the longest refill-to-full time, idle
// expiry only drops buckets that a new one would equal; eviction for size
// can drop a live bucket when the bound is too small for the clients active
// at once, so size the bound above that number. A *bucketgrid.Local
// obtained from Bucket remains usable after eviction but is no longer the
// key's bucket.
type Map struct {
	configFor func(key string) (core.Config, error)
	clock     clock.Clock            // nil: the default monotonic clock
	group     *bucketgrid.LocalGroup // the buckets' clock, listener and shared configurations
	idle      int64                  // nanoseconds; 0: never idle-expire
	// touchEvery is the precision of idle expiry and LRU order: a lookup
	// records its time only when the last record is this old.
	touchEvery int64
	perShard   int
	seed       maphash.Seed
	shift      uint // shard = hash >> shift
	shards     []mapShard
}

// mapShard is one shard of a Map. Lookups read it without locking:
// writers, which hold mu, make seq odd while they change the table, and a
// reader retries (or takes mu) when seq moved under it.
type mapShard struct {
	mu  sync.Mutex
	seq atomic.Uint64
	// tab is an open-addressing table with linear probing, indexed by the
	// low bits of a key's 64-bit hash; nil until the first insertion.
	tab atomic.Pointer[mapTable]
	n   int            // entries; guarded by mu
	_   [128 - 32]byte // a shard per pair of cache lines: no false sharing
}

// mapTable holds the slots; its length is a power of two and at most 13/16
// of it is in use, so a probe always meets a free slot. The high load keeps
// the tables small enough to stay in cache: a lookup costs one miss.
type mapTable struct {
	slots []mapSlot
}

// mapSlot is one slot; a nil entry marks it free. Its fields are atomic
// because lookups read them while a writer may be changing them.
type mapSlot struct {
	h atomic.Uint64
	e atomic.Pointer[mapEntry]
}

// mapEntry is a bucket with the bookkeeping of the map. The state of a
// single-bandwidth bucket and a short key live inside the entry, and equal
// configurations share one read-only copy (bucketgrid.LocalGroup), so that
// an entry is small and a lookup touches one allocation. key is immutable
// once the entry is published.
type mapEntry struct {
	bucketgrid.Local
	key  string
	last atomic.Int64 // clock time of a recent lookup (see touch)
	kbuf [inlineKey]byte
}

// inlineKey is the longest key stored inside its entry (an IPv4 address
// and port fit); longer keys are copied apart.
const inlineKey = 24

// DefaultMaxEntries is the bound of a Map without WithMaxEntries, the
// size of a typical Spring Boot service's Caffeine cache.
const DefaultMaxEntries = 100_000

// evictionSample is how many entries an insertion into a full shard looks at.
const evictionSample = 16

// New returns an empty map whose bucket for a key is created, on the key's
// first lookup, from configFor(key): per-client plans come from there. It
// takes the options WithClock (the clock of the buckets and of idle
// expiry), WithListener (of every bucket), WithMaxEntries and
// WithIdleTimeout.
func New(configFor func(key string) (core.Config, error), opts ...Option) *Map {
	o := options{maxEntries: DefaultMaxEntries}
	for _, opt := range opts {
		opt(&o)
	}
	var gopts []bucketgrid.Option
	if o.clock != nil {
		gopts = append(gopts, bucketgrid.WithClock(o.clock))
	}
	if o.listener != nil {
		gopts = append(gopts, bucketgrid.WithListener(o.listener))
	}
	// shards: a power of two, at most 256, each holding at least 16 entries
	// when the bound allows it.
	nshards := 256
	for nshards > 1 && o.maxEntries/nshards < 16 {
		nshards /= 2
	}
	c := o.clock
	if c == clock.Monotonic() {
		c = nil // read without an interface call
	}
	m := &Map{
		configFor:  configFor,
		clock:      c,
		group:      bucketgrid.NewLocalGroup(gopts...),
		idle:       int64(o.idle),
		touchEvery: int64(time.Millisecond),
		perShard:   o.maxEntries / nshards,
		seed:       maphash.MakeSeed(),
		shift:      uint(64 - bits.TrailingZeros(uint(nshards))),
		shards:     make([]mapShard, nshards),
	}
	if m.idle > 0 {
		m.touchEvery = min(m.touchEvery, m.idle/64)
	}
	return m
}

// now reads the map's clock.
func (m *Map) now() int64 {
	if m.clock == nil {
		return clock.Monotonic().Now()
	}
	return m.clock.Now()
}

func (m *Map) shard(h uint64) *mapShard {
	if m.shift == 64 {
		return &m.shards[0]
	}
	return &m.shards[h>>m.shift]
}

// expired reports whether e, last seen at e.last, is idle at now.
func (m *Map) expired(e *mapEntry, now int64) bool {
	return m.idle > 0 && now-e.last.Load() >= m.idle
}

// touch records a lookup of e at now. To keep lookups free of stores to
// shared memory, it only moves e.last when it lags by touchEvery or more, so
// idle expiry and LRU order are precise to touchEvery.
func (m *Map) touch(e *mapEntry, now int64) {
	if now-e.last.Load() >= m.touchEvery {
		e.last.Store(now)
	}
}

// Bucket returns key's bucket, creating it from configFor(key) when the key
// is new or its bucket has idled out. It returns configFor's error, or the
// *core.ConfigError of an invalid configuration, and then stores nothing.
// Concurrent first lookups of a key may each call configFor, but all get the
// same bucket.
func (m *Map) Bucket(key string) (*bucketgrid.Local, error) {
	e, _, err := m.get(key)
	if err != nil {
		return nil, err
	}
	return &e.Local, nil
}

// TryConsume is shorthand for taking n tokens from key's bucket: Bucket(key)
// then TryConsume. n ≤ 0 is refused (bucketgrid.ErrTokens) before the
// bucket is looked up.
func (m *Map) TryConsume(ctx context.Context, key string, n int64) (bool, error) {
	if n <= 0 {
		return false, tokensError(n)
	}
	e, _, err := m.get(key)
	if err != nil {
		return false, err
	}
	return e.Local.TryConsume(ctx, n)
}

// TryConsumeAndReturnRemaining is shorthand for Bucket(key) then
// TryConsumeAndReturnRemaining.
func (m *Map) TryConsumeAndReturnRemaining(ctx context.Context, key string, n int64) (core.Probe, error) {
	if n <= 0 {
		return core.Probe{}, tokensError(n)
	}
	e, _, err := m.get(key)
	if err != nil {
		return core.Probe{}, err
	}
	return e.Local.TryConsumeAndReturnRemaining(ctx, n)
}

// tokensError is the error of a consumption of n ≤ 0 tokens, as the
// buckets report it.
func tokensError(n int64) error { return fmt.Errorf("%w, got %d", bucketgrid.ErrTokens, n) }

// get returns key's live entry and the clock reading it was judged at,
// creating the entry if need be. The clock is read after the lookup starts,
// so that reading it overlaps the lookup's cache misses.
func (m *Map) get(key string) (*mapEntry, int64, error) {
	h := maphash.String(m.seed, key)
	s := m.shard(h)
	e := s.lookup(h, key)
	now := m.now()
	if e != nil && !m.expired(e, now) {
		m.touch(e, now)
		return e, now, nil
	}
	e, err := m.create(s, h, key, now)
	return e, now, err
}

// lookup returns key's entry, live or not, or nil, without locking when no
// writer interferes.
func (s *mapShard) lookup(h uint64, key string) *mapEntry {
	for range 4 {
		if seq := s.seq.Load(); seq&1 == 0 {
			e := s.probe(h, key)
			if s.seq.Load() == seq {
				return e
			}
		}
	}
	s.mu.Lock()
	e := s.probe(h, key)
	s.mu.Unlock()
	return e
}

// probe returns key's entry or nil; without the lock its answer is only
// good if seq did not move meanwhile.
func (s *mapShard) probe(h uint64, key string) *mapEntry {
	t := s.tab.Load()
	if t == nil {
		return nil
	}
	mask := uint64(len(t.slots) - 1)
	i := h & mask
	for range t.slots {
		sl := &t.slots[i]
		e := sl.e.Load()
		if e == nil {
			return nil
		}
		if sl.h.Load() == h && e.key == key {
			return e
		}
		i = (i + 1) & mask
	}
	return nil
}

// find returns the slot index of key, whose hash is h, or -1; the shard
// lock must be held.
func (s *mapShard) find(h uint64, key string) int {
	t := s.tab.Load()
	if t == nil {
		return -1
	}
	mask := uint64(len(t.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		sl := &t.slots[i]
		e := sl.e.Load()
		if e == nil {
			return -1
		}
		if sl.h.Load() == h && e.key == key {
			return int(i)
		}
	}
}

// write runs f under the shard lock as a writer: lookups that overlap it
// retry.
func (s *mapShard) write(f func()) {
	s.mu.Lock()
	s.seq.Add(1)
	defer func() {
		s.seq.Add(1)
		s.mu.Unlock()
	}()
	f()
}

// create builds key's bucket outside the lock (configFor may be slow) and
// inserts it unless another goroutine got there first.
func (m *Map) create(s *mapShard, h uint64, key string, now int64) (*mapEntry, error) {
	if m.configFor == nil {
		return nil, errors.New("localmap: a Map without a configuration function")
	}
	cfg, err := m.configFor(key)
	if err != nil {
		return nil, err
	}
	e := &mapEntry{}
	e.last.Store(now)
	if err := m.group.Init(&e.Local, cfg, now); err != nil {
		return nil, err
	}
	if len(key) <= inlineKey {
		n := copy(e.kbuf[:], key)
		e.key = unsafe.String(&e.kbuf[0], n)
	} else {
		e.key = strings.Clone(key) // never pin a caller's larger buffer
	}

	var got *mapEntry
	s.write(func() {
		if i := s.find(h, key); i >= 0 {
			o := s.tab.Load().slots[i].e.Load()
			if !m.expired(o, now) {
				m.touch(o, now)
				got = o
				return
			}
			s.delete(i)
		}
		if s.n >= m.perShard {
			m.evict(s, h, now)
		}
		s.insert(h, e)
		got = e
	})
	return got, nil
}

// insert adds e under hash h, growing the table to keep it at most 13/16
// full; the shard must be held for writing and e's key absent.
func (s *mapShard) insert(h uint64, e *mapEntry) {
	t := s.tab.Load()
	if t == nil || 16*(s.n+1) > 13*len(t.slots) {
		size := 8
		if t != nil {
			size = 2 * len(t.slots)
		}
		nt := &mapTable{slots: make([]mapSlot, size)}
		if t != nil {
			for i := range t.slots {
				if o := t.slots[i].e.Load(); o != nil {
					nt.place(t.slots[i].h.Load(), o)
				}
			}
		}
		s.tab.Store(nt)
		t = nt
	}
	t.place(h, e)
	s.n++
}

// place puts e in the first free slot of h's probe sequence.
func (t *mapTable) place(h uint64, e *mapEntry) {
	mask := uint64(len(t.slots) - 1)
	i := h & mask
	for t.slots[i].e.Load() != nil {
		i = (i + 1) & mask
	}
	t.slots[i].h.Store(h)
	t.slots[i].e.Store(e)
}

// delete empties slot i and shifts later members of its probe run back, so
// that no probe stops early at the hole; the shard must be held for
// writing.
func (s *mapShard) delete(i int) {
	slots := s.tab.Load().slots
	mask := len(slots) - 1
	s.n--
	for {
		slots[i].e.Store(nil)
		slots[i].h.Store(0)
		j := i
		for {
			j = (j + 1) & mask
			e := slots[j].e.Load()
			if e == nil {
				return
			}
			// the entry at j may fill the hole at i unless its home slot lies
			// cyclically in (i, j]
			h := slots[j].h.Load()
			home := int(h) & mask
			if (i <= j && (home <= i || home > j)) || (i > j && home <= i && home > j) {
				slots[i].h.Store(h)
				slots[i].e.Store(e)
				i = j
				break
			}
		}
	}
}

// evict makes room in a full shard: it looks at evictionSample entries from
// a pseudo-random slot (the new key's hash picks it), drops every idle one it
// sees and, if none was, the least recently used of them. The shard must be
// held for writing.
func (m *Map) evict(s *mapShard, h uint64, now int64) {
	slots := s.tab.Load().slots
	mask := len(slots) - 1
	victim, seen, dropped := -1, 0, false
	var victimLast int64
	// start far from the new key's own probe run; visit each slot once
	i := int(h>>17) & mask
	for visited := 0; seen < evictionSample && visited < len(slots); visited++ {
		e := slots[i].e.Load()
		if e == nil {
			i = (i + 1) & mask
			continue
		}
		seen++
		if m.expired(e, now) {
			// the slot may now hold a shifted entry: look at it again
			s.delete(i)
			dropped = true
			victim = -1
			visited--
			continue
		}
		if last := e.last.Load(); victim < 0 || last < victimLast {
			victim, victimLast = i, last
		}
		i = (i + 1) & mask
	}
	if !dropped && victim >= 0 {
		s.delete(victim)
	}
}

// Remove forgets key's bucket; the next lookup creates a new one.
func (m *Map) Remove(key string) {
	h := maphash.String(m.seed, key)
	s := m.shard(h)
	s.write(func() {
		if i := s.find(h, key); i >= 0 {
			s.delete(i)
		}
	})
}

// Len returns the number of buckets held, idle ones included until they are
// dropped.
func (m *Map) Len() int {
	n := 0
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		n += s.n
		s.mu.Unlock()
	}
	return n
}

// Sweep drops every bucket idle beyond the idle timeout and returns how many
// it dropped. The map never needs it to stay bounded; call it to give memory
// back after a burst of one-off keys.
func (m *Map) Sweep() int {
	if m.idle == 0 {
		return 0
	}
	now := m.now()
	dropped := 0
	var idle []*mapEntry
	var hashes []uint64
	for i := range m.shards {
		s := &m.shards[i]
		s.write(func() {
			t := s.tab.Load()
			if t == nil {
				return
			}
			idle, hashes = idle[:0], hashes[:0]
			for j := range t.slots {
				if e := t.slots[j].e.Load(); e != nil && m.expired(e, now) {
					idle, hashes = append(idle, e), append(hashes, t.slots[j].h.Load())
				}
			}
			for j, e := range idle {
				if k := s.find(hashes[j], e.key); k >= 0 {
					s.delete(k)
					dropped++
				}
			}
		})
	}
	return dropped
}
