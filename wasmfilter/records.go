package wasmfilter

// The records a Store keeps in shared data (slots and directories), the
// hashes that place a key, and the reads and writes of single entries.

import (
	"encoding/binary"
	"errors"
	"strconv"
	"time"

	"github.com/bucketgrid/bucketgrid/cas"
)

// Record formats; a reader treats a slot of any other first byte as a
// record of another build (see readSlot).
const (
	slotFormat      = 2
	directoryFormat = 3
)

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
	if n := 13 + binary.MaxVarintLen64 + len(key) + len(data); cap(dst)-len(dst) < n {
		dst = append(make([]byte, 0, len(dst)+n), dst...)
	}
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
	if n := 1 + 12*len(es); cap(dst)-len(dst) < n {
		dst = append(make([]byte, 0, len(dst)+n), dst...) // one allocation, not one per doubling
	}
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
