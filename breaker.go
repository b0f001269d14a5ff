package bucketgrid

import (
	"sync"
	"sync/atomic"
)

// breaker is the circuit breaker of one route. Closed, operations go to the
// executor; after `failures` outages in a row it opens, and operations are
// decided locally at once until a probe is answered.
type breaker struct {
	open      atomic.Bool
	fails     atomic.Int32           // outages in a row while closed
	nextProbe atomic.Int64           // clock time from which the next probe may start
	probing   atomic.Bool            // a probe is in flight
	key       atomic.Pointer[string] // a key of the route that failed, for the background prober
}

// failed records an outage at now and reports whether it opened b.
func (b *breaker) failed(key string, limit int, now, probe int64) bool {
	if k := b.key.Load(); k == nil || *k != key {
		b.key.Store(&key)
	}
	if int(b.fails.Add(1)) < limit || b.open.Load() {
		return false
	}
	b.nextProbe.Store(now + probe)
	return b.open.CompareAndSwap(false, true)
}

// succeeded records an answer of the executor.
func (b *breaker) succeeded() {
	if b.fails.Load() != 0 {
		b.fails.Store(0)
	}
}

// startProbe reports whether the caller, at now, should probe the open
// breaker: at most one probe at a time, none before nextProbe.
func (b *breaker) startProbe(now int64) bool {
	return now >= b.nextProbe.Load() && b.probing.CompareAndSwap(false, true)
}

// probed ends a probe: answered closes the breaker, otherwise the next probe
// waits until now+probe.
func (b *breaker) probed(answered bool, now, probe int64) {
	if answered {
		b.fails.Store(0)
		b.open.Store(false)
	} else {
		b.nextProbe.Store(now + probe)
	}
	b.probing.Store(false)
}

// maxRoutes bounds the breakers kept; past it they are all forgotten (a
// grid's routes are its members, a few; names of members long gone would
// otherwise pile up).
const maxRoutes = 1024

// breakers holds the breaker of each route.
type breakers struct {
	mu     sync.RWMutex
	routes map[string]*breaker // guarded by mu
	single breaker             // for executors without routes
}

// of returns route's breaker.
func (bs *breakers) of(route string, routed bool) *breaker {
	if !routed {
		return &bs.single
	}
	bs.mu.RLock()
	b := bs.routes[route]
	bs.mu.RUnlock()
	if b != nil {
		return b
	}
	bs.mu.Lock()
	defer bs.mu.Unlock()
	if b = bs.routes[route]; b == nil {
		if bs.routes == nil || len(bs.routes) >= maxRoutes {
			bs.routes = make(map[string]*breaker)
		}
		b = new(breaker)
		bs.routes[route] = b
	}
	return b
}

// open returns the open breakers.
func (bs *breakers) open() []*breaker {
	var open []*breaker
	if bs.single.open.Load() {
		open = append(open, &bs.single)
	}
	bs.mu.RLock()
	for _, b := range bs.routes {
		if b.open.Load() {
			open = append(open, b)
		}
	}
	bs.mu.RUnlock()
	return open
}

// openCount returns the number of open breakers.
func (bs *breakers) openCount() int {
	n := 0
	if bs.single.open.Load() {
		n++
	}
	bs.mu.RLock()
	for _, b := range bs.routes {
		if b.open.Load() {
			n++
		}
	}
	bs.mu.RUnlock()
	return n
}
