package bucketgrid

import (
	"context"
	"errors"
	"hash/maphash"
	"math/bits"
	"sync"
	"time"

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
// Choose an idle timeout longer than the longest refill-to-full time and a
// bound above the number of concurrently active clients, and eviction only
// ever drops buckets that a new one would equal. A *Local obtained from
// Bucket remains usable after eviction but is no longer the key's bucket.
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
	// m maps a key's 64-bit hash to its entry; entries whose keys share a
	// hash are chained through next.
	m map[uint64]*mapEntry
	n int // entries, counting chained ones
	_ [40]byte
}

// mapEntry is a bucket with the bookkeeping of the map. A single-bandwidth
// configuration and its state live inside the entry, so that a lookup
// touches one allocation.
type mapEntry struct {
	Local
	key  string
	last int64     // clock time of the last lookup; guarded by the shard lock
	next *mapEntry // same hash, different key
	bw   [1]core.Bandwidth
	st   [1]core.BandState
}

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
	for i := range m.shards {
		m.shards[i].m = make(map[uint64]*mapEntry)
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
	e := s.m[h]
	for e != nil && e.key != key {
		e = e.next
	}
	if e != nil && !m.expired(e, now) {
		e.last = now
		s.mu.Unlock()
		return e, nil
	}
	s.mu.Unlock()
	return m.create(s, h, key, now)
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
	e := &mapEntry{key: key, last: now}
	if err := e.Local.init(&cfg, m.clock, m.listener); err != nil {
		return nil, err
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
	head := s.m[h]
	for o := head; o != nil; o = o.next {
		if o.key == key {
			if !m.expired(o, now) {
				o.last = max(o.last, now)
				return o, nil
			}
			s.remove(h, o)
			head = s.m[h]
			break
		}
	}
	if s.n >= m.perShard {
		m.evict(s, now)
		head = s.m[h]
	}
	e.next = head
	s.m[h] = e
	s.n++
	return e, nil
}

// remove unlinks e, stored under hash h; the shard lock must be held.
func (s *mapShard) remove(h uint64, e *mapEntry) {
	head := s.m[h]
	if head == e {
		if e.next == nil {
			delete(s.m, h)
		} else {
			s.m[h] = e.next
		}
	} else {
		for p := head; p != nil; p = p.next {
			if p.next == e {
				p.next = e.next
				break
			}
		}
	}
	e.next = nil
	s.n--
}

// evict makes room in a full shard: it samples entries, drops every idle one
// it sees and, if none was, the least recently used of the sample. The shard
// lock must be held.
func (m *LocalMap) evict(s *mapShard, now int64) {
	var (
		victim  *mapEntry
		victimH uint64
		seen    int
		dropped bool
	)
	for h, e := range s.m {
		for ; e != nil; e = e.next {
			if m.expired(e, now) {
				s.remove(h, e) // safe: deleting during range is allowed
				dropped = true
				break // the chain changed; move on
			}
			if victim == nil || e.last < victim.last {
				victim, victimH = e, h
			}
		}
		if seen++; seen >= evictionSample {
			break
		}
	}
	if !dropped && victim != nil {
		s.remove(victimH, victim)
	}
}

// Remove forgets key's bucket; the next lookup creates a new one.
func (m *LocalMap) Remove(key string) {
	h := maphash.String(m.seed, key)
	s := m.shard(h)
	s.mu.Lock()
	for e := s.m[h]; e != nil; e = e.next {
		if e.key == key {
			s.remove(h, e)
			break
		}
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
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		for h, head := range s.m {
			for e := head; e != nil; {
				next := e.next
				if m.expired(e, now) {
					s.remove(h, e)
					dropped++
				}
				e = next
			}
		}
		s.mu.Unlock()
	}
	return dropped
}
