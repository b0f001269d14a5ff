// Package envoystats is an in-memory copy of how Envoy keeps the metrics a
// proxy-wasm plugin defines (envoy source/extensions/common/wasm/context.cc,
// defineMetric and the calls after it), for tests of the filter natively and
// under wazero.
//
// The rules it copies: a defined name is filed under the "wasmcustom."
// namespace, and every VM defining the same name shares one stat; ids are
// per VM, their two low bits the metric type, handed out in steps of 4 per
// type; incrementing a counter by 0 or less, or a histogram at all, is
// BAD_ARGUMENT; recording adds to a counter, sets a gauge and records a
// histogram value; reading a histogram is BAD_ARGUMENT; an unknown id is
// NOT_FOUND.
package envoystats

import (
	"sort"
	"strings"
	"sync"
)

// Status codes, as in proxy_status_t.
const (
	OK          uint32 = 0
	NotFound    uint32 = 1
	BadArgument uint32 = 2
)

// Metric types, as in proxy_metric_type_t.
const (
	Counter   uint32 = 0
	Gauge     uint32 = 1
	Histogram uint32 = 2
)

// Namespace is the prefix Envoy gives every metric a plugin defines.
const Namespace = "wasmcustom."

type stat struct {
	kind    uint32
	value   uint64 // counter, gauge
	samples []uint64
}

// Stats is one Envoy's stats store. It is safe for concurrent use.
type Stats struct {
	mu    sync.Mutex
	stats map[string]*stat
}

// New returns an empty store.
func New() *Stats { return &Stats{stats: map[string]*stat{}} }

// VM is one VM's view: its own id space over the shared stats.
type VM struct {
	s    *Stats
	next [3]uint32
	ids  map[uint32]*stat
}

// VM returns a new VM's view of s.
func (s *Stats) VM() *VM {
	return &VM{s: s, next: [3]uint32{Counter, Gauge, Histogram}, ids: map[uint32]*stat{}}
}

// Define implements proxy_define_metric.
func (v *VM) Define(kind uint32, name string) (uint32, uint32) {
	if kind > Histogram {
		return 0, BadArgument
	}
	v.s.mu.Lock()
	defer v.s.mu.Unlock()
	full := Namespace + name
	st := v.s.stats[full]
	if st == nil {
		st = &stat{kind: kind}
		v.s.stats[full] = st
	}
	v.next[kind] += 4
	id := v.next[kind]
	v.ids[id] = st
	return id, OK
}

// with runs f on the stat of id and its type, under the lock; an unknown
// id is NotFound.
func (v *VM) with(id uint32, f func(st *stat, kind uint32) uint32) uint32 {
	v.s.mu.Lock()
	defer v.s.mu.Unlock()
	st := v.ids[id]
	if st == nil {
		return NotFound
	}
	return f(st, id&3)
}

// Increment implements proxy_increment_metric.
func (v *VM) Increment(id uint32, delta int64) uint32 {
	return v.with(id, func(st *stat, kind uint32) uint32 {
		if kind == Histogram || kind == Counter && delta <= 0 {
			return BadArgument
		}
		st.value += uint64(delta) // a gauge's negative delta wraps to a subtraction
		return OK
	})
}

// Record implements proxy_record_metric.
func (v *VM) Record(id uint32, value uint64) uint32 {
	return v.with(id, func(st *stat, kind uint32) uint32 {
		switch kind {
		case Counter:
			st.value += value
		case Gauge:
			st.value = value
		default:
			st.samples = append(st.samples, value)
		}
		return OK
	})
}

// Get implements proxy_get_metric.
func (v *VM) Get(id uint32) (value uint64, status uint32) {
	status = v.with(id, func(st *stat, kind uint32) uint32 {
		if kind == Histogram {
			return BadArgument
		}
		value = st.value
		return OK
	})
	return value, status
}

// Value returns the counter or gauge name as Envoy's admin /stats shows it
// (the namespace stripped), and whether it exists.
func (s *Stats) Value(name string) (uint64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats[Namespace+name]
	if st == nil {
		return 0, false
	}
	return st.value, true
}

// Names returns every stat's name as /stats shows it, sorted.
func (s *Stats) Names() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for n := range s.stats {
		out = append(out, strings.TrimPrefix(n, Namespace))
	}
	sort.Strings(out)
	return out
}
