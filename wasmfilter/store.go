package wasmfilter

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/core"
)

// Store is a cas.Store on proxy-wasm shared data, the only state the worker
// VMs of one Envoy share.
//
// Shared data has no delete and no TTL through ABI 0.2.1, and lives as long
// as the Envoy process, so Store keeps a fixed table: a key hashes to a home
// slot and probes at most Probes slots from there. Each slot is one shared-data
// entry, "<prefix>/<slot>", holding a record of its own: format version,
// expiry time, the full key (so a colliding key is recognised) and the value.
// A slot is free when it holds a tombstone or an expired record; writes into
// a free slot are compare-and-swaps against the free record's token, so two
// VMs can never both take it. An expired record is one whose bucket is full
// again (the TTL core.Process computes with core.ExpireAfterRefill): taking
// over such a slot loses nothing, because a full bucket and a new one are the
// same. When every probed slot holds a live record of another key, Insert
// fails with ErrNoFreeSlot.
//
// The first-insert race: a slot that has never been written can only be
// created with cas 0, which Envoy treats as an unconditional write. When k
// VMs insert into the same never-written slot at the same moment, the last
// write wins and the other k−1 writes are lost: at most (k−1)×cost extra
// requests are admitted, k ≤ the number of worker threads, once per slot
// for the life of the Envoy process. Every later write of the slot is a real
// compare-and-swap. Prepare, which the filter calls when a plugin is
// configured, creates every slot as a tombstone before the VM serves
// traffic, which moves those unconditional writes out of request handling.
//
// Version packs the probe index (high 32 bits) with Envoy's cas token (low
// 32 bits); tokens come from one process-wide counter, so a token still in
// place proves the slot still holds the record that was read.
type Store struct {
	host   Host
	prefix string
	slots  uint32
	probes uint32
	clock  clock.Clock
}

// Probes is the number of slots a key may occupy, starting at its home slot.
const Probes = 4

// recordVersion is the format version of a slot record.
const recordVersion = 1

// ErrNoFreeSlot reports that every slot a key may use holds a live bucket of
// another key: the table is full. It wraps cas.ErrStore.
var ErrNoFreeSlot = fmt.Errorf("%w: wasmfilter: no free shared-data slot", cas.ErrStore)

var errCorruptRecord = errors.New("corrupt shared-data record")

// NewStore returns a store of slots slots (at least 1) under the shared-data
// key prefix, measuring expiry on c, which must read Unix time; a nil c
// means the host's clock (host.Now).
func NewStore(host Host, prefix string, slots uint32, c clock.Clock) *Store {
	if c == nil {
		c = hostClock(host)
	}
	return &Store{host: host, prefix: prefix, slots: max(slots, 1), probes: min(Probes, max(slots, 1)), clock: c}
}

// hostClock is the host's wall clock as a clock.Clock.
func hostClock(host Host) clock.Clock { return clock.Func(host.Now, true) }

// record is a decoded slot.
type record struct {
	expires int64 // Unix ns; 0: never
	key     string
	data    []byte
}

func (r *record) live(now int64) bool {
	return r.key != "" && (r.expires <= 0 || now < r.expires)
}

func appendRecord(dst []byte, key string, data []byte, expires int64) []byte {
	dst = append(dst, recordVersion)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(expires))
	dst = binary.AppendUvarint(dst, uint64(len(key)))
	dst = append(dst, key...)
	return append(dst, data...)
}

func decodeRecord(b []byte) (record, error) {
	var r record
	if len(b) < 9 || b[0] != recordVersion {
		return r, errCorruptRecord
	}
	r.expires = int64(binary.LittleEndian.Uint64(b[1:9]))
	n, w := binary.Uvarint(b[9:])
	if w <= 0 || n > uint64(len(b)-9-w) {
		return r, errCorruptRecord
	}
	off := 9 + w
	r.key = string(b[off : off+int(n)])
	r.data = b[off+int(n):]
	return r, nil
}

// fnv1a is the 64-bit FNV-1a hash; inlined to keep the .wasm small.
func fnv1a(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

func (s *Store) slotKey(key string, probe uint32) string {
	return s.slotName((uint32(fnv1a(key)%uint64(s.slots)) + probe) % s.slots)
}

func (s *Store) slotName(slot uint32) string {
	return s.prefix + "/" + strconv.FormatUint(uint64(slot), 10)
}

// Prepare creates every never-written slot as a tombstone, so that no
// insert ever needs an unconditional write. Run it before the VM serves
// requests: then a worker can only lose a write to another worker's Prepare
// if that worker, in the instant between this one's read and write of the
// same slot, finished its own Prepare and stored a bucket there. Slots that
// exist are left alone, so calling it again (a reconfiguration, another
// worker starting) is harmless. When every slot exists, a marker key
// "<prefix>/ready" records it, and later calls cost one read.
func (s *Store) Prepare() error {
	marker := s.prefix + "/ready"
	want := strconv.FormatUint(uint64(s.slots), 10)
	if v, _, err := s.host.SharedData(marker); err == nil && string(v) == want {
		return nil
	}
	tomb := appendRecord(nil, "", nil, 0)
	for slot := range s.slots {
		name := s.slotName(slot)
		_, _, err := s.host.SharedData(name)
		if err == nil {
			continue
		}
		if !errors.Is(err, StatusNotFound) {
			return fmt.Errorf("%w: get %s: %w", cas.ErrStore, name, err)
		}
		if err := s.host.SetSharedData(name, tomb, 0); err != nil {
			return fmt.Errorf("%w: set %s: %w", cas.ErrStore, name, err)
		}
	}
	if err := s.host.SetSharedData(marker, []byte(want), 0); err != nil {
		return fmt.Errorf("%w: set %s: %w", cas.ErrStore, marker, err)
	}
	return nil
}

// read returns the slot's record; exists is false for a never-written slot.
// A record this version cannot decode (another format version sharing the
// prefix during an upgrade) is returned as a live record of no key: it
// occupies the slot and is never overwritten.
func (s *Store) read(slotKey string) (r record, token uint32, exists bool, err error) {
	v, token, err := s.host.SharedData(slotKey)
	if errors.Is(err, StatusNotFound) {
		return r, 0, false, nil
	}
	if err != nil {
		return r, 0, false, fmt.Errorf("%w: get %s: %w", cas.ErrStore, slotKey, err)
	}
	if r, err = decodeRecord(v); err != nil {
		return record{key: "\x00foreign"}, token, true, nil
	}
	return r, token, true, nil
}

// write sets the slot with the token; a mismatch is a lost race.
func (s *Store) write(slotKey string, rec []byte, token uint32) (bool, error) {
	err := s.host.SetSharedData(slotKey, rec, token)
	if errors.Is(err, StatusCASMismatch) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("%w: set %s: %w", cas.ErrStore, slotKey, err)
	}
	return true, nil
}

func (s *Store) expiry(ttl time.Duration) int64 {
	if ttl <= 0 {
		return 0
	}
	return s.clock.Now() + int64(ttl)
}

// Get returns the live value of key. It probes from the key's home slot and
// stops at the first never-written slot: the key cannot lie beyond it.
func (s *Store) Get(ctx context.Context, key string) ([]byte, cas.Version, bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, false, err
	}
	now := s.clock.Now()
	for p := uint32(0); p < s.probes; p++ {
		r, token, exists, err := s.read(s.slotKey(key, p))
		if err != nil {
			return nil, 0, false, err
		}
		if !exists {
			break
		}
		if r.key == key && r.live(now) {
			return r.data, cas.Version(uint64(p)<<32 | uint64(token)), true, nil
		}
	}
	return nil, 0, false, nil
}

// Insert writes key into the first free probed slot. It reports a lost race
// (false, nil) when key is live in any probed slot or when another VM took
// the free slot first; see Store for the one write that cannot be
// conditional.
func (s *Store) Insert(ctx context.Context, key string, data []byte, ttl time.Duration) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	now := s.clock.Now()
	var (
		target   string
		token    uint32 // 0 for a never-written slot: see Store
		haveFree bool
	)
	for p := uint32(0); p < s.probes; p++ {
		sk := s.slotKey(key, p)
		r, tok, exists, err := s.read(sk)
		if err != nil {
			return false, err
		}
		switch {
		case !exists:
			if !haveFree {
				target, token, haveFree = sk, 0, true
			}
		case r.key == key && r.live(now):
			return false, nil
		case !r.live(now):
			if !haveFree {
				target, token, haveFree = sk, tok, true
			}
			continue
		default:
			continue
		}
		break // a never-written slot ends the probe sequence
	}
	if !haveFree {
		return false, ErrNoFreeSlot
	}
	return s.write(target, appendRecord(nil, key, data, s.expiry(ttl)), token)
}

// Replace writes key only when its slot still holds the version read.
func (s *Store) Replace(ctx context.Context, key string, data []byte, ver cas.Version, ttl time.Duration) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	p, token := uint32(ver>>32), uint32(ver)
	if p >= s.probes || token == 0 {
		return false, nil
	}
	return s.write(s.slotKey(key, p), appendRecord(nil, key, data, s.expiry(ttl)), token)
}

// Delete writes a tombstone over key's slot, by compare-and-swap; shared
// data itself cannot be deleted. Deleting an absent key is not an error.
func (s *Store) Delete(ctx context.Context, key string) error {
	for attempt := 0; attempt < 16; attempt++ {
		_, ver, found, err := s.Get(ctx, key)
		if err != nil || !found {
			return err
		}
		ok, err := s.write(s.slotKey(key, uint32(ver>>32)), appendRecord(nil, "", nil, 0), uint32(ver))
		if err != nil || ok {
			return err
		}
	}
	return fmt.Errorf("%w: wasmfilter: delete %s: too many lost races", cas.ErrStore, core.RedactKey(key))
}
