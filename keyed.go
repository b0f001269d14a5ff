package bucketgrid

import (
	"context"
	"errors"
	"hash/maphash"
	"math/bits"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/bucketgrid/bucketgrid/core"
)

// LocalMap is a bounded, idle-expiring map of local buckets, one per client
// key: the in-process per-client limiter (what the Spring Boot article does
// with a Caffeine cache of Bucket4j buckets). It is safe for concurrent use.
//
// Memory is bounded whatever keys are seen: the map never holds more than
// its maximum number of entries. When a shard of the map is full, inserting
// a key first drops entries idle beyond the idle timeout, then the least
// recently used of a random sample (an approximate LRU, as Redis does). An
// entry idle beyond the timeout is also replaced by a fresh bucket when its
// key is next seen. There is no background goroutine: all expiry is driven
// by the map's clock as keys are used, so a FakeClock drives it in tests.
//
// Evicting a bucket forgets its state: a client whose bucket was evicted
// starts again with a new one (full, or at the configured initial tokens).
// With an idle timeout longer than the longest refill-to-full time, idle
// expiry only drops buckets that a new one would equal; eviction for size
// can drop a live bucket when the bound is too small for the clients active
// at once, so size the bound above that number. A *Local obtained from Bucket
// remains usable after eviction but is no longer the key's bucket.
type LocalMap struct {
	configFor func(key string) (core.Config, error)
	clock     Clock // nil: the default monotonic clock
	listener  Listener
	idle      int64 // nanoseconds; 0: never idle-expire
	perShard  int
	seed      maphash.Seed
	shift     uint // shard = hash >> shift
	shards    []mapShard
}

type mapShard struct {
	mu sync.Mutex
	// slots is an open-addressing table with linear probing, indexed by the
	// low bits of a key's 64-bit hash; a nil entry marks a free slot. Its
	// length is a power of two at least twice n.
	slots []mapSlot
	n     int
	_     [128 - 40]byte // a shard per pair of cache lines: no false sharing
}

type mapSlot struct {
	h uint64
	e *mapEntry
}

// mapEntry is a bucket with the bookkeeping of the map. A single-bandwidth
// configuration and its state, and a short key, live inside the entry, so a
// lookup touches one allocation.
type mapEntry struct {
	Local
	key  string
	last int64 // clock time of the last lookup; guarded by the shard lock
	kbuf [inlineKey]byte
	bw   [1]core.Bandwidth
	st   [1]core.BandState
}

// inlineKey is the longest key stored inside its entry (an IPv6 address
// fits); longer keys are copied apart.
const inlineKey = 40

// LocalMapOption configures NewLocalMap.
type LocalMapOption func(*localMapOptions)

type localMapOptions struct {
	maxEntries int
	idle       time.Duration
	clock      Clock
	listener   Listener
}

// DefaultMaxEntries is the bound of a LocalMap without WithMaxEntries, the
// size of the Spring Boot article's cache.
const DefaultMaxEntries = 100_000

// evictionSample is how many entries an insertion into a full shard looks at.
const evictionSample = 16

// WithMaxEntries bounds the number of buckets a LocalMap holds; n < 1 means
// 1. The default is DefaultMaxEntries. The map is split into shards of
// n/shards entries each, so it may begin evicting slightly before it holds n
// buckets, never after.
func WithMaxEntries(n int) LocalMapOption {
	return func(o *localMapOptions) { o.maxEntries = max(n, 1) }
}

// WithIdleTimeout expires a bucket that has not been looked up for d
// (Caffeine's expireAfterAccess); d ≤ 0, the default, expires nothing for
// idleness (the bound still applies).
func WithIdleTimeout(d time.Duration) LocalMapOption {
	return func(o *localMapOptions) { o.idle = max(d, 0) }
}

// WithMapClock sets the clock of the map's buckets and of idle expiry; the
// default is MonotonicClock. Aligned refill styles need a wall clock.
func WithMapClock(c Clock) LocalMapOption { return func(o *localMapOptions) { o.clock = c } }

// WithMapListener sets the listener of every bucket of the map.
func WithMapListener(l Listener) LocalMapOption { return func(o *localMapOptions) { o.listener = l } }

// NewLocalMap returns an empty map whose bucket for a key is created, on the
// key's first lookup, from configFor(key): per-client plans come from there.
func NewLocalMap(configFor func(key string) (core.Config, error), opts ...LocalMapOption) *LocalMap {
	o := localMapOptions{maxEntries: DefaultMaxEntries}
	for _, opt := range opts {
		opt(&o)
	}
	// shards: a power of two, at most 256, each holding at least 16 entries
	// when the bound allows it.
	nshards := 256
	for nshards > 1 && o.maxEntries/nshards < 16 {
		nshards /= 2
	}
	m := &LocalMap{
		configFor: configFor,
		clock:     normalizeClock(o.clock),
		listener:  o.listener,
		idle:      int64(o.idle),
		perShard:  o.maxEntries / nshards,
		seed:      maphash.MakeSeed(),
		shift:     uint(64 - bits.TrailingZeros(uint(nshards))),
		shards:    make([]mapShard, nshards),
	}
	return m
}

// now reads the map's clock.
func (m *LocalMap) now() int64 {
	if m.clock == nil {
		return int64(time.Since(monoBase))
	}
	return m.clock.Now()
}

func (m *LocalMap) shard(h uint64) *mapShard {
	if m.shift == 64 {
		return &m.shards[0]
	}
	return &m.shards[h>>m.shift]
}

// expired reports whether e, last seen at e.last, is idle at now; the shard
// lock must be held.
func (m *LocalMap) expired(e *mapEntry, now int64) bool {
	return m.idle > 0 && now-e.last >= m.idle
}

// Bucket returns key's bucket, creating it from configFor(key) when the key
// is new or its bucket has idled out. It returns configFor's error, or the
// *core.ConfigError of an invalid configuration, and then stores nothing.
// Concurrent first lookups of a key may each call configFor, but all get the
// same bucket.
func (m *LocalMap) Bucket(key string) (*Local, error) {
	e, err := m.get(key, m.now())
	if err != nil {
		return nil, err
	}
	return &e.Local, nil
}

// TryConsume is shorthand for taking n tokens from key's bucket: Bucket(key)
// then TryConsume, with one clock reading for both.
func (m *LocalMap) TryConsume(ctx context.Context, key string, n int64) (bool, error) {
	if n <= 0 {
		return false, tokensError(n)
	}
	now := m.now()
	e, err := m.get(key, now)
	if err != nil {
		return false, err
	}
	l := &e.Local
	l.mu.Lock()
	ok := l.b.TryConsume(n, now)
	l.mu.Unlock()
	if l.listener != nil {
		l.report(ok, n)
	}
	return ok, nil
}

// TryConsumeAndReturnRemaining is shorthand for Bucket(key) then
// TryConsumeAndReturnRemaining, with one clock reading for both.
func (m *LocalMap) TryConsumeAndReturnRemaining(ctx context.Context, key string, n int64) (core.Probe, error) {
	if n <= 0 {
		return core.Probe{}, tokensError(n)
	}
	now := m.now()
	e, err := m.get(key, now)
	if err != nil {
		return core.Probe{}, err
	}
	l := &e.Local
	l.mu.Lock()
	p := l.b.TryConsumeAndReturnRemaining(n, now)
	l.mu.Unlock()
	if l.listener != nil {
		l.report(p.Consumed, n)
	}
	return p, nil
}

// get returns key's live entry at now, creating it if need be.
func (m *LocalMap) get(key string, now int64) (*mapEntry, error) {
	h := maphash.String(m.seed, key)
	s := m.shard(h)
	s.mu.Lock()
	if i := s.find(h, key); i >= 0 {
		if e := s.slots[i].e; !m.expired(e, now) {
			e.last = now
			s.mu.Unlock()
			return e, nil
		}
	}
	s.mu.Unlock()
	return m.create(s, h, key, now)
}

// find returns the slot of key, whose hash is h, or -1; the shard lock must
// be held.
func (s *mapShard) find(h uint64, key string) int {
	if len(s.slots) == 0 {
		return -1
	}
	mask := uint64(len(s.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		sl := &s.slots[i]
		if sl.e == nil {
			return -1
		}
		if sl.h == h && sl.e.key == key {
			return int(i)
		}
	}
}

// create builds key's bucket outside the lock (configFor may be slow) and
// inserts it unless another goroutine got there first.
func (m *LocalMap) create(s *mapShard, h uint64, key string, now int64) (*mapEntry, error) {
	if m.configFor == nil {
		return nil, errors.New("bucketgrid: LocalMap without a configuration function")
	}
	cfg, err := m.configFor(key)
	if err != nil {
		return nil, err
	}
	e := &mapEntry{last: now}
	if err := e.Local.init(&cfg, m.clock, m.listener); err != nil {
		return nil, err
	}
	if len(key) <= inlineKey {
		n := copy(e.kbuf[:], key)
		e.key = unsafe.String(&e.kbuf[0], n)
	} else {
		e.key = strings.Clone(key) // never pin a caller's larger buffer
	}
	if len(cfg.Bandwidths) == 1 {
		e.bw[0] = cfg.Bandwidths[0]
		e.b = core.NewBucket(core.Config{Bandwidths: e.bw[:]}, now)
		e.st[0] = e.b.State[0]
		e.b.State = e.st[:]
	} else {
		e.b = core.NewBucket(cfg.Clone(), now)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if i := s.find(h, key); i >= 0 {
		o := s.slots[i].e
		if !m.expired(o, now) {
			o.last = max(o.last, now)
			return o, nil
		}
		s.delete(i)
	}
	if s.n >= m.perShard {
		m.evict(s, h, now)
	}
	s.insert(h, e)
	return e, nil
}

// insert adds e under hash h, growing the table to keep it at most half
// full; the shard lock must be held and e's key absent.
func (s *mapShard) insert(h uint64, e *mapEntry) {
	if 2*(s.n+1) > len(s.slots) {
		old := s.slots
		s.slots = make([]mapSlot, max(8, 2*len(old)))
		for _, sl := range old {
			if sl.e != nil {
				s.place(sl)
			}
		}
	}
	s.place(mapSlot{h, e})
	s.n++
}

// place puts sl in the first free slot of its probe sequence.
func (s *mapShard) place(sl mapSlot) {
	mask := uint64(len(s.slots) - 1)
	i := sl.h & mask
	for s.slots[i].e != nil {
		i = (i + 1) & mask
	}
	s.slots[i] = sl
}

// delete empties slot i and shifts later members of its probe run back, so
// that no lookup stops early at the hole; the shard lock must be held.
func (s *mapShard) delete(i int) {
	mask := len(s.slots) - 1
	s.n--
	for {
		s.slots[i] = mapSlot{}
		j := i
		for {
			j = (j + 1) & mask
			if s.slots[j].e == nil {
				return
			}
			// the entry at j may fill the hole at i unless its home slot lies
			// cyclically in (i, j]
			home := int(s.slots[j].h) & mask
			if (i <= j && (home <= i || home > j)) || (i > j && home <= i && home > j) {
				s.slots[i] = s.slots[j]
				i = j
				break
			}
		}
	}
}

// evict makes room in a full shard: it looks at evictionSample entries from
// a pseudo-random slot (the new key's hash picks it), drops every idle one it
// sees and, if none was, the least recently used of them. The shard lock must
// be held.
func (m *LocalMap) evict(s *mapShard, h uint64, now int64) {
	mask := len(s.slots) - 1
	victim, seen, dropped := -1, 0, false
	// start far from the new key's own probe run; visit each slot once
	i := int(h>>17) & mask
	for visited := 0; seen < evictionSample && visited < len(s.slots); visited++ {
		e := s.slots[i].e
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
		if victim < 0 || e.last < s.slots[victim].e.last {
			victim = i
		}
		i = (i + 1) & mask
	}
	if !dropped && victim >= 0 {
		s.delete(victim)
	}
}

// Remove forgets key's bucket; the next lookup creates a new one.
func (m *LocalMap) Remove(key string) {
	h := maphash.String(m.seed, key)
	s := m.shard(h)
	s.mu.Lock()
	if i := s.find(h, key); i >= 0 {
		s.delete(i)
	}
	s.mu.Unlock()
}

// Len returns the number of buckets held, idle ones included until they are
// dropped.
func (m *LocalMap) Len() int {
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
func (m *LocalMap) Sweep() int {
	if m.idle == 0 {
		return 0
	}
	now := m.now()
	dropped := 0
	var idle []mapSlot
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		idle = idle[:0]
		for _, sl := range s.slots {
			if sl.e != nil && m.expired(sl.e, now) {
				idle = append(idle, sl)
			}
		}
		for _, sl := range idle {
			if j := s.find(sl.h, sl.e.key); j >= 0 {
				s.delete(j)
				dropped++
			}
		}
		s.mu.Unlock()
	}
	return dropped
}
