// Package shareddata is an in-memory copy of Envoy's proxy-wasm shared data
// (proxy-wasm-cpp-host src/shared_data.cc), for tests of the filter natively
// and under wazero.
//
// The rules it copies: Get returns the value with its cas token, or
// NOT_FOUND; Set with cas 0 writes unconditionally; Set with a non-zero cas
// fails with CAS_MISMATCH when the key exists with another token, and
// creates an absent key whatever the cas; every successful Set stamps a new
// token from one process-wide counter that starts at 1 and skips 0 when it
// wraps. Keys are never deleted.
package shareddata

import "sync"

// Status codes, as in proxy_status_t.
const (
	OK          uint32 = 0
	NotFound    uint32 = 1
	CASMismatch uint32 = 8
)

type entry struct {
	value []byte
	cas   uint32
}

// Data is one vm_id's shared data. It is safe for concurrent use, like
// Envoy's, which serialises every call under one mutex.
type Data struct {
	mu      sync.Mutex
	m       map[string]entry
	nextCas uint32
	// Fail, when set, is consulted before every call; a non-zero status is
	// returned instead of performing the call (fault injection).
	Fail func(op, key string) uint32
	// BeforeSet, when set, runs (without the lock held) before every Set:
	// tests use it to interleave another VM's write between a read and a
	// write.
	BeforeSet  func(key string)
	gets       int
	sets       int
	mismatches int
}

// New returns empty shared data.
func New() *Data { return &Data{m: map[string]entry{}, nextCas: 1} }

// SetNextCas sets the counter (tests of the wrap-around).
func (d *Data) SetNextCas(c uint32) {
	d.mu.Lock()
	d.nextCas = c
	d.mu.Unlock()
}

func (d *Data) next() uint32 {
	c := d.nextCas
	d.nextCas++
	if d.nextCas == 0 {
		d.nextCas = 1
	}
	return c
}

// Get returns a copy of the value of key and its cas token.
func (d *Data) Get(key string) ([]byte, uint32, uint32) {
	if d.Fail != nil {
		if st := d.Fail("get", key); st != OK {
			return nil, 0, st
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.gets++
	e, ok := d.m[key]
	if !ok {
		return nil, 0, NotFound
	}
	return append([]byte(nil), e.value...), e.cas, OK
}

// Set writes key under Envoy's compare-and-swap rules.
func (d *Data) Set(key string, value []byte, cas uint32) uint32 {
	if d.Fail != nil {
		if st := d.Fail("set", key); st != OK {
			return st
		}
	}
	if d.BeforeSet != nil {
		d.BeforeSet(key)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	e, ok := d.m[key]
	if ok && cas != 0 && cas != e.cas {
		d.mismatches++
		return CASMismatch
	}
	d.m[key] = entry{value: append([]byte(nil), value...), cas: d.next()}
	d.sets++
	return OK
}

// Len returns the number of keys.
func (d *Data) Len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.m)
}

// Gets returns the number of reads.
func (d *Data) Gets() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.gets
}

// Sets returns the number of successful writes.
func (d *Data) Sets() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.sets
}

// Mismatches returns the number of writes refused with CAS_MISMATCH.
func (d *Data) Mismatches() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.mismatches
}
