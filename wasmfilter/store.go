package wasmfilter

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/core"
)

var (
	_ cas.Store      = (*Store)(nil)
	_ cas.KeyChecker = (*Store)(nil)
)

// Store is a cas.Store on proxy-wasm shared data, the only state the worker
// VMs of one Envoy share. Shared data has no delete and no TTL through ABI
// 0.2.1 and lives as long as the Envoy process, so Store keeps a fixed table
// of slots under a shared-data prefix.
//
// # Layout
//
// Slots ("<prefix>/s/<i>") hold one bucket each: a record of the key, its
// expiry, the value and the slot's generation, a counter raised every time
// the slot changes hands. Directories ("<prefix>/d/<j>", one per
// SlotsPerDirectory slots) say where each key lives: a key hashes to exactly
// one directory, whose entries map a fingerprint of the key to a slot and the
// generation the key got there. The directory is the one place that decides
// whether a key exists, so every writer that creates a key compare-and-swaps
// the same shared-data entry; the slot can be anywhere in the table.
//
// Get reads the key's directory, then the slot an entry names, and believes
// the slot only when it holds the key with the entry's generation: a slot
// that has been given to another key since (a higher generation, another
// key) is never read as this key's bucket. Replace compare-and-swaps the
// slot on the token Get returned.
//
// Insert first looks for the key's own record: an expired one (a bucket
// that has refilled completely, equal to a new one) is reused in place, by
// compare-and-swap on the token any Replace of the old record would use, so
// a writer holding a version from before the expiry always loses. Otherwise
// it claims a slot: a free or expired one among Probes slots of a sequence
// derived from the key (or, with EvictOldest, the probed bucket closest to
// full), writes the record there with the next generation, and publishes the
// slot in the directory by compare-and-swap. If the directory changed in
// between, the claim is released and the insert reports a lost race. The
// directory entry of the slot's previous owner is removed on the way, best
// effort; entries that lead nowhere are also dropped whenever a directory
// fills up.
//
// # Capacity
//
// Any key may use any slot its probes reach, so the table fills almost
// completely before a new key finds none free: with Probes = 128, the first
// turn-away comes at 92 % to 100 % of the slots (measured in the README).
// With EvictOldest a full table evicts instead: the bucket closest to full
// among the probed ones, whose client then starts again from a full bucket
// — the loss is the tokens that bucket still lacked. A spent bucket is
// evicted only when every probed bucket is spent (see claimable), so a
// client that spent its bucket cannot get a fresh one by waiting for
// newcomers. Without EvictOldest Insert returns a *TableFullError.
//
// # The one unconditional write
//
// A shared-data key that has never been written can only be created with cas
// 0, which Envoy treats as an unconditional write. Prepare, which the filter
// calls when a plugin is configured, creates every slot and directory before
// the VM serves traffic, so that while serving every write is a true
// compare-and-swap. What remains is a worker whose start-up read and write of
// one entry straddle another worker's complete start-up and a request that
// wrote that very entry; see Prepare. If Prepare fails, entries are created
// on first use with the same race per entry.
//
// # Versions
//
// Version packs the slot (high 32 bits) with Envoy's cas token (low 32
// bits). Tokens come from one process-wide counter, so a token still in
// place proves the slot still holds the record that was read.
//
// A Store is safe for concurrent use; the filter uses one per plugin and VM.
type Store struct {
	host    Host
	prefix  string
	slots   uint32
	dirs    uint32
	probes  uint32
	evict   bool
	cost    int64
	clock   clock.Clock
	evicted atomic.Uint64

	mu        sync.Mutex
	memo      memo    // the record the last Get found
	places    []place // where keys were found, by hash; see Get
	fullUntil int64   // the table was full until then; see claimable
	absent    absence // the directory of the last key Get did not find
}

// place remembers the slot and generation a key was published at.
type place struct {
	key       string
	slot, gen uint32
}

// absence is what Get read of the directory of a key it did not find, for
// the Insert that usually follows: Insert publishes by compare-and-swap on
// token, so a directory that changed since makes it lose the race, never
// write over another writer's entry.
type absence struct {
	key   string
	es    []dirEntry
	token uint32
	dead  []int
}

// placeCache bounds the places a Store remembers.
const placeCache = 1024

// StoreConfig configures a Store.
type StoreConfig struct {
	// Slots is the number of buckets the table holds (at least 1; 0 means
	// DefaultSlots).
	Slots uint32
	// EvictOldest makes Insert evict the probed bucket closest to full when
	// no probed slot is free, instead of returning a *TableFullError.
	EvictOldest bool
	// Cost is the tokens one request takes (0 means 1): a bucket with fewer
	// in some bandwidth is spent, and is evicted only when every probed
	// bucket is.
	Cost int64
	// Clock measures the expiry times and must read Unix time (every worker
	// VM compares them); nil means the host's clock (Host.Now).
	Clock clock.Clock
}

// Table geometry.
const (
	// Probes is the number of slots an insert may examine for a free one.
	Probes = 128
	// SlotsPerDirectory is the number of slots per directory entry of
	// shared data.
	SlotsPerDirectory = 8
	// directoryCap bounds the entries of one directory: four times the
	// average of a full table, which a uniform hash exceeds with a
	// probability of 3×10⁻¹¹ per directory (Poisson, mean 8).
	directoryCap = 32
	// MaxKeyLen is the longest key a Store holds; a longer or empty key is
	// a *core.KeyError, before any host call. The filter fits every key to
	// it (core.FitKey).
	MaxKeyLen = 128
)

// ErrTableFull reports that no slot a new key may use is free: every probed
// slot holds a live bucket of another key. A *TableFullError matches it.
var ErrTableFull = errors.New("wasmfilter: slot table full")

// TableFullError is returned by Insert when the table has no room for a new
// key and the store does not evict.
type TableFullError struct {
	// Wait is how long until the first probed bucket expires (frees its
	// slot): a lower bound of when the key could find room. 0 when unknown.
	Wait time.Duration
}

// Error says that the table is full and when a probed slot frees.
func (e *TableFullError) Error() string {
	return "wasmfilter: slot table full (a slot frees in " + e.Wait.String() + ")"
}

// Is reports whether target is ErrTableFull.
func (e *TableFullError) Is(target error) bool { return target == ErrTableFull }

// errCorruptRecord marks a directory this build cannot decode; the error
// that carries it is a store failure (cas.ErrStore).
var errCorruptRecord = errors.New("wasmfilter: corrupt shared-data record")

// NewStore returns the table of cfg.Slots slots under the shared-data key
// prefix. Call Prepare before serving requests.
func NewStore(host Host, prefix string, cfg StoreConfig) *Store {
	n := cfg.Slots
	if n == 0 {
		n = DefaultSlots
	}
	c := cfg.Clock
	if c == nil {
		c = hostClock(host)
	}
	return &Store{
		host: host, prefix: prefix, slots: n, dirs: (n + SlotsPerDirectory - 1) / SlotsPerDirectory,
		probes: min(Probes, n), evict: cfg.EvictOldest, cost: max(cfg.Cost, 1), clock: c, places: make([]place, min(n, placeCache)),
	}
}

// CheckKey implements cas.KeyChecker: it returns a *core.KeyError for a key
// the Store cannot hold — empty, or longer than MaxKeyLen bytes — and nil
// for any other, without a host call. A cas.Executor calls it once per
// request before it touches the Store, so such a key is the client's error
// (the filter answers 400), never a store failure; every method of the
// Store checks the key again.
func (s *Store) CheckKey(key string) error {
	switch {
	case key == "":
		return core.InvalidKey(key, "empty")
	case len(key) > MaxKeyLen:
		return core.InvalidKey(key, "longer than "+strconv.Itoa(MaxKeyLen)+" bytes")
	}
	return nil
}

// check refuses a call whose ctx has ended or whose key the Store cannot
// hold, before any host call.
func (s *Store) check(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.CheckKey(key)
}

// hostClock is the host's wall clock as a clock.Clock.
func hostClock(host Host) clock.Clock { return clock.Func(host.Now, true) }

// Evictions returns the number of live buckets this Store has evicted.
func (s *Store) Evictions() uint64 { return s.evicted.Load() }

// Get returns the live value of key: one directory read and one slot read,
// or only the slot read when this Store found key before. It remembers
// where it found a key (a small table indexed by hash), and trusts the slot
// it remembers only while the slot still holds key at the generation the
// directory gave it: a slot never returns to a key at an old generation,
// and a directory only moves a key whose slot no longer holds it, so that
// record is still the one the directory names.
func (s *Store) Get(ctx context.Context, key string) ([]byte, cas.Version, bool, error) {
	if err := s.check(ctx, key); err != nil {
		return nil, 0, false, err
	}
	now := s.clock.Now()
	h := s.hash(key)
	i := h.fp % uint32(len(s.places))
	s.mu.Lock()
	pl := s.places[i]
	s.mu.Unlock()
	var (
		f  found
		ok bool
	)
	if pl.key == key {
		rec, token, err := s.readSlot(pl.slot)
		if err != nil {
			return nil, 0, false, err
		}
		f, ok = found{slot: pl.slot, token: token, rec: rec}, !rec.foreign && rec.key == key && rec.gen == pl.gen
	}
	if !ok {
		var (
			es    []dirEntry
			token uint32
			dead  []int
			err   error
		)
		if f, ok, es, token, dead, err = s.lookup(key, h); err != nil {
			return nil, 0, false, err
		}
		if !ok {
			s.mu.Lock()
			s.absent = absence{key: key, es: es, token: token, dead: dead}
			s.mu.Unlock()
			return nil, 0, false, nil
		}
	}
	s.mu.Lock()
	s.places[i] = place{key: key, slot: f.slot, gen: f.rec.gen}
	if f.rec.live(now) {
		s.memo = memo{key: key, slot: f.slot, token: f.token, gen: f.rec.gen, expires: f.rec.expires}
	}
	s.mu.Unlock()
	if !f.rec.live(now) {
		return nil, 0, false, nil
	}
	return f.rec.data, cas.Version(uint64(f.slot)<<32 | uint64(f.token)), true, nil
}

// Replace writes key when its slot still holds the version read and the
// record has not expired: an expired key is gone, as in every store.
func (s *Store) Replace(ctx context.Context, key string, data []byte, ver cas.Version, ttl time.Duration) (bool, error) {
	if err := s.check(ctx, key); err != nil {
		return false, err
	}
	slot, token := uint32(ver>>32), uint32(ver)
	if slot >= s.slots || token == 0 {
		return false, nil
	}
	s.mu.Lock()
	m := s.memo
	s.mu.Unlock()
	if m.key != key || m.slot != slot || m.token != token {
		rec, t, err := s.readSlot(slot)
		if err != nil {
			return false, err
		}
		if t != token || rec.foreign || rec.key != key {
			return false, nil
		}
		m = memo{key: key, slot: slot, token: token, gen: rec.gen, expires: rec.expires}
	}
	now := s.clock.Now()
	if m.expires > 0 && now >= m.expires {
		return false, nil
	}
	return s.write(s.slotName(slot), appendSlot(nil, m.gen, s.expiry(now, ttl), key, data), token)
}

// Insert writes key when it is absent or expired. It reports a lost race
// (false, nil) when key is live, or when another writer changed the slot or
// the directory first; a *TableFullError when no probed slot is free (see
// StoreConfig.EvictOldest).
func (s *Store) Insert(ctx context.Context, key string, data []byte, ttl time.Duration) (bool, error) {
	if err := s.check(ctx, key); err != nil {
		return false, err
	}
	now := s.clock.Now()
	h := s.hash(key)
	s.mu.Lock()
	a := s.absent
	s.absent = absence{}
	s.mu.Unlock()
	var (
		f      found
		ok     bool
		es     []dirEntry
		dtoken uint32
		dead   []int
		err    error
	)
	if a.key == key {
		es, dtoken, dead = a.es, a.token, a.dead
	} else if f, ok, es, dtoken, dead, err = s.lookup(key, h); err != nil {
		return false, err
	}
	exp := s.expiry(now, ttl)
	if ok {
		if f.rec.live(now) {
			return false, nil
		}
		// Reuse the expired record in place, on the token a Replace of it
		// would use: one of the two writers loses.
		return s.write(s.slotName(f.slot), appendSlot(nil, f.rec.gen, exp, key, data), f.token)
	}
	es, ok, err = s.makeRoom(es, dead, now)
	if !ok || err != nil {
		return false, err
	}
	slot, token, prev, err := s.claimable(h, now)
	if err != nil {
		return false, err
	}
	gen := prev.gen + 1
	if ok, err := s.write(s.slotName(slot), appendSlot(nil, gen, exp, key, data), token); !ok || err != nil {
		return false, err
	}
	if prev.key != "" && prev.key != key && prev.live(now) {
		s.evicted.Add(1)
	}
	es = append(es, dirEntry{fp: h.fp, slot: slot, gen: gen})
	if ok, err := s.write(s.dirName(h.dir), appendDirectory(nil, es), dtoken); !ok || err != nil {
		// Another insert into this directory came first: give the slot back
		// and let the executor start again from Get.
		s.release(slot, key, gen)
		return false, err
	}
	if prev.key != "" && prev.key != key {
		s.unlink(prev.key, slot, prev.gen)
	}
	s.mu.Lock()
	s.places[h.fp%uint32(len(s.places))] = place{key: key, slot: slot, gen: gen}
	s.mu.Unlock()
	return true, nil
}

// Delete frees key's slot by compare-and-swap (shared data itself cannot be
// deleted) and removes its directory entry. Deleting an absent key is not an
// error.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := s.check(ctx, key); err != nil {
		return err
	}
	h := s.hash(key)
	for range 16 {
		f, ok, _, _, _, err := s.lookup(key, h)
		if err != nil || !ok {
			return err
		}
		ok, err = s.write(s.slotName(f.slot), appendSlot(nil, f.rec.gen, 0, "", nil), f.token)
		if err != nil {
			return err
		}
		if ok {
			s.unlink(key, f.slot, f.rec.gen)
			return nil
		}
	}
	return errors.Join(cas.ErrStore, errors.New("wasmfilter: delete: too many lost races"))
}

// Prepare creates every slot and directory that does not exist yet, empty,
// so that no later write needs an unconditional one. Run it before the VM
// serves requests: a worker can then only lose a write to another worker's
// Prepare if, between this worker's read and write of one entry, the other
// worker finished its whole Prepare and a request wrote that same entry —
// then that request's write is undone (for a slot: one bucket's update; for
// a directory: its entries, whose keys start again from full buckets).
// Entries that exist are left alone, so calling it again (a reconfiguration,
// another worker starting) is harmless; when every entry exists a marker
// records it, and later calls cost one read.
func (s *Store) Prepare() error {
	marker := s.prefix + "/ready"
	want := "v" + strconv.Itoa(slotFormat) + " " + strconv.FormatUint(uint64(s.slots), 10)
	if v, _, err := s.host.SharedData(marker); err == nil && string(v) == want {
		return nil
	}
	create := func(name string, value []byte) error {
		_, _, err := s.host.SharedData(name)
		if err == nil {
			return nil
		}
		if !errors.Is(err, StatusNotFound) {
			return storeErr("get", name, err)
		}
		if err := s.host.SetSharedData(name, value, 0); err != nil {
			return storeErr("set", name, err)
		}
		return nil
	}
	empty := appendSlot(nil, 0, 0, "", nil)
	for i := range s.slots {
		if err := create(s.slotName(i), empty); err != nil {
			return err
		}
	}
	noEntries := appendDirectory(nil, nil)
	for i := range s.dirs {
		if err := create(s.dirName(i), noEntries); err != nil {
			return err
		}
	}
	if err := s.host.SetSharedData(marker, []byte(want), 0); err != nil {
		return storeErr("set", marker, err)
	}
	return nil
}
