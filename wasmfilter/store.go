package wasmfilter

import (
	"context"
	"encoding/binary"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/core"
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
// — the loss is the tokens that bucket still lacked. Without it Insert
// returns a *TableFullError.
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
// A Store is safe for concurrent use; the filter uses one per policy and VM.
type Store struct {
	host    Host
	prefix  string
	slots   uint32
	dirs    uint32
	probes  uint32
	evict   bool
	clock   clock.Clock
	evicted atomic.Uint64

	mu     sync.Mutex
	memo   memo    // the record the last Get found
	places []place // where keys were found, by hash; see Get
}

// place remembers the slot and generation a key was published at.
type place struct {
	key       string
	slot, gen uint32
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
	// probability below 10⁻⁹ per directory.
	directoryCap = 32
	// MaxKeyLen is the longest key a Store holds; a longer or empty key is
	// a *core.KeyError, before any host call. The filter fits every key to
	// it (core.FitKey).
	MaxKeyLen = 128
)

// Record formats; a reader treats any other first byte as a record of
// another build (see read).
const (
	slotFormat      = 2
	directoryFormat = 3
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

func (e *TableFullError) Error() string {
	return "wasmfilter: slot table full (a slot frees in " + e.Wait.String() + ")"
}

// Is reports whether target is ErrTableFull.
func (e *TableFullError) Is(target error) bool { return target == ErrTableFull }

// ErrCorruptRecord wraps a shared-data entry this build wrote but cannot
// decode. It wraps cas.ErrStore.
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
		probes: min(Probes, n), evict: cfg.EvictOldest, clock: c, places: make([]place, min(n, placeCache)),
	}
}

// hostClock is the host's wall clock as a clock.Clock.
func hostClock(host Host) clock.Clock { return clock.Func(host.Now, true) }

// Evictions returns the number of live buckets this Store has evicted.
func (s *Store) Evictions() uint64 { return s.evicted.Load() }

var le = binary.LittleEndian

// slotRecord is a decoded slot.
type slotRecord struct {
	gen     uint32
	expires int64 // Unix ns; 0: never
	key     string
	data    []byte
	foreign bool // another build's record: occupied, never touched
}

func (r *slotRecord) live(now int64) bool {
	return r.foreign || r.key != "" && (r.expires <= 0 || now < r.expires)
}

func appendSlot(dst []byte, gen uint32, expires int64, key string, data []byte) []byte {
	dst = append(dst, slotFormat)
	dst = le.AppendUint32(dst, gen)
	dst = le.AppendUint64(dst, uint64(expires))
	dst = binary.AppendUvarint(dst, uint64(len(key)))
	dst = append(dst, key...)
	return append(dst, data...)
}

func decodeSlot(b []byte) (slotRecord, bool) {
	var r slotRecord
	if len(b) < 13 || b[0] != slotFormat {
		return r, false
	}
	r.gen = le.Uint32(b[1:])
	r.expires = int64(le.Uint64(b[5:]))
	n, w := binary.Uvarint(b[13:])
	if w <= 0 || n > uint64(len(b)-13-w) {
		return r, false
	}
	off := 13 + w
	r.key = string(b[off : off+int(n)])
	r.data = b[off+int(n):]
	return r, true
}

// dirEntry says that the key of fingerprint fp got slot at generation gen.
type dirEntry struct {
	fp, slot, gen uint32
}

func appendDirectory(dst []byte, es []dirEntry) []byte {
	dst = append(dst, directoryFormat)
	for _, e := range es {
		dst = le.AppendUint32(le.AppendUint32(le.AppendUint32(dst, e.fp), e.slot), e.gen)
	}
	return dst
}

func decodeDirectory(b []byte) ([]dirEntry, bool) {
	if len(b) < 1 || b[0] != directoryFormat || (len(b)-1)%12 != 0 {
		return nil, false
	}
	es := make([]dirEntry, (len(b)-1)/12)
	for i := range es {
		p := b[1+12*i:]
		es[i] = dirEntry{fp: le.Uint32(p), slot: le.Uint32(p[4:]), gen: le.Uint32(p[8:])}
	}
	return es, true
}

// The hashes of a key: FNV-1a spread by the SplitMix64 finalizer, one
// derivation per use so that directory, fingerprint and probe sequence are
// independent.
func fnv1a(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

func mix(h uint64) uint64 {
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	return h ^ h>>31
}

type keyHash struct {
	dir, fp, start, step uint32
}

func (s *Store) hash(key string) keyHash {
	h := fnv1a(key)
	a, b := mix(h), mix(h^0x9e3779b97f4a7c15)
	k := keyHash{dir: uint32(a % uint64(s.dirs)), fp: uint32(a >> 32), start: uint32(b % uint64(s.slots)), step: 1}
	if s.slots > 1 {
		// A step coprime to the table size makes the probes distinct.
		k.step = 1 + uint32((b>>32)%uint64(s.slots-1))
		for gcd(k.step, s.slots) != 1 {
			k.step++
		}
	}
	return k
}

func gcd(a, b uint32) uint32 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func (k *keyHash) probe(i, slots uint32) uint32 {
	return uint32((uint64(k.start) + uint64(i)*uint64(k.step)) % uint64(slots))
}

func (s *Store) slotName(i uint32) string {
	return s.prefix + "/s/" + strconv.FormatUint(uint64(i), 10)
}
func (s *Store) dirName(i uint32) string { return s.prefix + "/d/" + strconv.FormatUint(uint64(i), 10) }

// storeErr marks a host failure; the message names the shared-data entry,
// never a bucket key.
func storeErr(op, name string, err error) error {
	return &hostError{op: op, name: name, err: err}
}

type hostError struct {
	op, name string
	err      error
}

func (e *hostError) Error() string {
	return "wasmfilter: shared data " + e.op + " " + e.name + ": " + e.err.Error()
}

func (e *hostError) Unwrap() []error { return []error{cas.ErrStore, e.err} }

// readSlot returns slot i's record and token; a never-written slot reads as
// an empty one with token 0 (see Store for that write).
func (s *Store) readSlot(i uint32) (slotRecord, uint32, error) {
	name := s.slotName(i)
	v, token, err := s.host.SharedData(name)
	if errors.Is(err, StatusNotFound) {
		return slotRecord{}, 0, nil
	}
	if err != nil {
		return slotRecord{}, 0, storeErr("get", name, err)
	}
	r, ok := decodeSlot(v)
	if !ok {
		// Another build's record (a format upgrade sharing the vm_id): it
		// occupies the slot and is never overwritten.
		return slotRecord{foreign: true}, token, nil
	}
	return r, token, nil
}

// readDir returns directory i's entries and token; a never-written
// directory is empty with token 0. A directory this build cannot decode is
// an error: the keys it maps cannot be found.
func (s *Store) readDir(i uint32) ([]dirEntry, uint32, error) {
	name := s.dirName(i)
	v, token, err := s.host.SharedData(name)
	if errors.Is(err, StatusNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, storeErr("get", name, err)
	}
	es, ok := decodeDirectory(v)
	if !ok {
		return nil, 0, storeErr("decode", name, errCorruptRecord)
	}
	return es, token, nil
}

// write sets a shared-data entry if its token is still token; a mismatch is
// a lost race.
func (s *Store) write(name string, value []byte, token uint32) (bool, error) {
	err := s.host.SetSharedData(name, value, token)
	if errors.Is(err, StatusCASMismatch) {
		return false, nil
	}
	if err != nil {
		return false, storeErr("set", name, err)
	}
	return true, nil
}

func (s *Store) expiry(now int64, ttl time.Duration) int64 {
	if ttl <= 0 {
		return 0
	}
	return now + int64(ttl)
}

// memo is what the last Get found, so that Replace knows the record's
// generation and expiry without reading the slot again.
type memo struct {
	key     string
	slot    uint32
	token   uint32
	gen     uint32
	expires int64
}

// found is a key's record as its directory leads to it.
type found struct {
	slot, token uint32
	rec         slotRecord
}

// lookup follows key's directory entries; dead lists the entries of key's
// fingerprint whose slot no longer holds it at their generation.
func (s *Store) lookup(key string, h keyHash) (f found, ok bool, es []dirEntry, dtoken uint32, dead []int, err error) {
	es, dtoken, err = s.readDir(h.dir)
	if err != nil {
		return f, false, nil, 0, nil, err
	}
	for i, e := range es {
		if e.fp != h.fp || e.slot >= s.slots {
			continue
		}
		rec, token, err := s.readSlot(e.slot)
		if err != nil {
			return f, false, nil, 0, nil, err
		}
		if !rec.foreign && rec.key == key && rec.gen == e.gen {
			return found{slot: e.slot, token: token, rec: rec}, true, es, dtoken, dead, nil
		}
		dead = append(dead, i)
	}
	return f, false, es, dtoken, dead, nil
}

func checkKey(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	switch {
	case key == "":
		return core.InvalidKey(key, "empty")
	case len(key) > MaxKeyLen:
		return core.InvalidKey(key, "longer than "+strconv.Itoa(MaxKeyLen)+" bytes")
	}
	return nil
}

// Get returns the live value of key: one directory read and one slot read,
// or only the slot read when this Store found key before. It remembers
// where it found a key (a small table indexed by hash), and trusts the slot
// it remembers only while the slot still holds key at the generation the
// directory gave it: a slot never returns to a key at an old generation,
// and a directory only moves a key whose slot no longer holds it, so that
// record is still the one the directory names.
func (s *Store) Get(ctx context.Context, key string) ([]byte, cas.Version, bool, error) {
	if err := checkKey(ctx, key); err != nil {
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
		var err error
		if f, ok, _, _, _, err = s.lookup(key, h); err != nil || !ok {
			return nil, 0, false, err
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
	if err := checkKey(ctx, key); err != nil {
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
	if err := checkKey(ctx, key); err != nil {
		return false, err
	}
	now := s.clock.Now()
	h := s.hash(key)
	f, ok, es, dtoken, dead, err := s.lookup(key, h)
	if err != nil {
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

// makeRoom returns the directory entries without dead ones, with room for
// one more. When the directory is full it drops every entry whose slot no
// longer holds its key at its generation, and frees (by compare-and-swap)
// the slots of expired buckets before dropping their entries: a writer
// reusing an expired record in place compares that same token, so no record
// can come back to life behind the directory's back. If the directory is
// still full, it evicts the bucket closest to full (EvictOldest) or reports
// the table full. ok is false when an eviction lost a race.
func (s *Store) makeRoom(es []dirEntry, dead []int, now int64) (out []dirEntry, ok bool, err error) {
	out = make([]dirEntry, 0, len(es)+1)
	for i, e := range es {
		if len(dead) > 0 && dead[0] == i {
			dead = dead[1:]
			continue
		}
		out = append(out, e)
	}
	if len(out) < directoryCap {
		return out, true, nil
	}
	kept := out[:0]
	var (
		victim     dirEntry
		victimTok  uint32
		victimGen  uint32
		haveVictim bool
		soonest    int64
	)
	for _, e := range out {
		rec, token, err := s.readSlot(e.slot)
		if err != nil {
			return nil, false, err
		}
		if rec.foreign || rec.key == "" || rec.gen != e.gen || s.hash(rec.key).fp != e.fp {
			continue // the slot has changed hands: a dead entry
		}
		if !rec.live(now) {
			freed, err := s.write(s.slotName(e.slot), appendSlot(nil, rec.gen, 0, "", nil), token)
			if err != nil {
				return nil, false, err
			}
			if !freed {
				kept = append(kept, e) // written meanwhile: keep it
			}
			continue
		}
		kept = append(kept, e)
		if rec.expires > 0 && (!haveVictim || rec.expires < soonest) {
			victim, victimTok, victimGen, haveVictim, soonest = e, token, rec.gen, true, rec.expires
		}
	}
	if len(kept) < directoryCap {
		return kept, true, nil
	}
	if !s.evict || !haveVictim {
		return nil, false, fullError(haveVictim, soonest, now)
	}
	ok, err = s.write(s.slotName(victim.slot), appendSlot(nil, victimGen, 0, "", nil), victimTok)
	if !ok || err != nil {
		return nil, false, err
	}
	s.evicted.Add(1)
	for i, e := range kept {
		if e == victim {
			return append(kept[:i], kept[i+1:]...), true, nil
		}
	}
	return kept, true, nil
}

func fullError(known bool, soonest, now int64) error {
	e := &TableFullError{}
	if known {
		e.Wait = time.Duration(max(soonest-now, 0))
	}
	return e
}

// claimable returns the slot an insert of h takes: the first free or
// expired one of its probes, or with EvictOldest the probed live bucket that
// expires first; prev is its current record.
func (s *Store) claimable(h keyHash, now int64) (slot, token uint32, prev slotRecord, err error) {
	var (
		best     uint32
		bestTok  uint32
		bestRec  slotRecord
		haveBest bool
	)
	for i := range s.probes {
		sl := h.probe(i, s.slots)
		rec, tok, err := s.readSlot(sl)
		if err != nil {
			return 0, 0, prev, err
		}
		if !rec.live(now) {
			return sl, tok, rec, nil
		}
		if !rec.foreign && rec.expires > 0 && (!haveBest || rec.expires < bestRec.expires) {
			best, bestTok, bestRec, haveBest = sl, tok, rec, true
		}
	}
	if !s.evict || !haveBest {
		return 0, 0, prev, fullError(haveBest, bestRec.expires, now)
	}
	return best, bestTok, bestRec, nil
}

// release frees slot if it still holds key at gen: an unpublished claim.
func (s *Store) release(slot uint32, key string, gen uint32) {
	rec, token, err := s.readSlot(slot)
	if err == nil && !rec.foreign && rec.key == key && rec.gen == gen {
		_, _ = s.write(s.slotName(slot), appendSlot(nil, gen, 0, "", nil), token)
	}
}

// unlink removes the directory entry that gave slot to key at gen, if it is
// still there. Best effort: an entry left behind leads to a slot that no
// longer holds key at gen, which every reader recognises as dead.
func (s *Store) unlink(key string, slot, gen uint32) {
	h := s.hash(key)
	es, token, err := s.readDir(h.dir)
	if err != nil {
		return
	}
	for i, e := range es {
		if e.fp == h.fp && e.slot == slot && e.gen == gen {
			_, _ = s.write(s.dirName(h.dir), appendDirectory(nil, append(es[:i:i], es[i+1:]...)), token)
			return
		}
	}
}

// Delete frees key's slot by compare-and-swap (shared data itself cannot be
// deleted) and removes its directory entry. Deleting an absent key is not an
// error.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := checkKey(ctx, key); err != nil {
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
