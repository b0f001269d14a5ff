// Package memstore is the in-memory reference implementation of cas.Store:
// a map under a mutex, with TTLs on a caller-supplied clock. It is a real
// backend — it passes the whole TCK — and the model a backend author reads
// first. It holds any key: it has no key rule, so it does not implement
// cas.KeyChecker. It implements the optional cas.Writer and cas.Batcher, as
// a reference for those too: a write reports the version it produced, a
// lost race the value that won, and a batch costs one injected latency (see
// WithLatency) however many operations it carries, as a pipelined network
// store would.
package memstore

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/clock"
)

// Store is an in-memory cas.Store. The zero value is not usable; call New.
// Expired entries stay in memory until an operation, on any key, runs at
// least a second (of its clock) after the last sweep: it removes them all,
// so keys nobody uses again are released within a second of expiring while
// the store is in use; a store no operation reaches keeps them until one
// does.
type Store struct {
	mu      sync.Mutex
	entries map[string]entry
	next    cas.Version
	clock   clock.Clock
	latency time.Duration
	// nextSweep is when an operation next removes every expired entry;
	// peak the most entries the map held since it was last rebuilt
	nextSweep int64
	peak      int
}

// sweepEvery is how often, at most, an operation of a Store also removes
// every expired entry (see Store).
const sweepEvery = time.Second

// shrinkMin is the fewest entries the map must have held to be rebuilt
// once it holds under a quarter of them: a Go map keeps the room of the
// most entries it ever held.
const shrinkMin = 1024

type entry struct {
	data    []byte
	ver     cas.Version
	expires int64 // 0: never
}

// Option configures a Store.
type Option func(*Store)

// WithClock sets the clock TTLs are measured on; the default is
// clock.Wall().
func WithClock(c clock.Clock) Option { return func(s *Store) { s.clock = c } }

// WithLatency adds a wait to every operation, outside the lock, to model a
// network round trip in benchmarks. Waits under 2 ms yield the processor in
// a loop instead of sleeping: timers on some virtual machines fire no sooner
// than about 1 ms, which would turn 50 µs into 1 ms.
func WithLatency(d time.Duration) Option { return func(s *Store) { s.latency = d } }

// New returns an empty store.
func New(opts ...Option) *Store {
	s := &Store{entries: make(map[string]entry), clock: clock.Wall()}
	for _, o := range opts {
		o(s)
	}
	return s
}

func (s *Store) wait(ctx context.Context) error {
	switch {
	case s.latency >= 2*time.Millisecond:
		time.Sleep(s.latency)
	case s.latency > 0:
		for end := time.Now().Add(s.latency); time.Now().Before(end); {
			runtime.Gosched()
		}
	}
	return ctx.Err()
}

// live returns the entry of key if present and not expired; s.mu held.
// Once every sweepEvery it removes every expired entry first.
func (s *Store) live(key string) (entry, bool) {
	now := s.clock.Now()
	if now >= s.nextSweep {
		s.sweep(now)
	}
	e, ok := s.entries[key]
	if ok && e.expires != 0 && now >= e.expires {
		delete(s.entries, key)
		return entry{}, false
	}
	return e, ok
}

// sweep removes every expired entry and rebuilds the map when it holds
// under a quarter of its peak; s.mu held.
func (s *Store) sweep(now int64) {
	s.nextSweep = now + int64(sweepEvery)
	for k, e := range s.entries {
		if e.expires != 0 && now >= e.expires {
			delete(s.entries, k)
		}
	}
	if s.peak >= shrinkMin && len(s.entries) < s.peak/4 {
		m := make(map[string]entry, len(s.entries))
		for k, e := range s.entries {
			m[k] = e
		}
		s.entries, s.peak = m, len(m)
	}
}

func (s *Store) put(key string, data []byte, ttl time.Duration) {
	s.next++
	e := entry{data: append([]byte(nil), data...), ver: s.next}
	if ttl > 0 {
		e.expires = s.clock.Now() + int64(ttl)
	}
	s.entries[key] = e
	s.peak = max(s.peak, len(s.entries))
}

var (
	_ cas.Store   = (*Store)(nil)
	_ cas.Writer  = (*Store)(nil)
	_ cas.Batcher = (*Store)(nil)
)

// Get returns a copy of key's value and its version.
func (s *Store) Get(ctx context.Context, key string) ([]byte, cas.Version, bool, error) {
	if err := s.wait(ctx); err != nil {
		return nil, 0, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.live(key)
	if !ok {
		return nil, 0, false, nil
	}
	return append([]byte(nil), e.data...), e.ver, true, nil
}

// Insert stores data if key is absent or expired.
func (s *Store) Insert(ctx context.Context, key string, data []byte, ttl time.Duration) (bool, error) {
	if err := s.wait(ctx); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.live(key); ok {
		return false, nil
	}
	s.put(key, data, ttl)
	return true, nil
}

// Replace stores data if key's version is still ver.
func (s *Store) Replace(ctx context.Context, key string, data []byte, ver cas.Version, ttl time.Duration) (bool, error) {
	if err := s.wait(ctx); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.live(key); !ok || e.ver != ver {
		return false, nil
	}
	s.put(key, data, ttl)
	return true, nil
}

// Write performs op, an OpInsert or an OpReplace, as Insert or Replace
// would, and reports the version written or, after a lost race, the value
// and version that won (Result.Current is always true).
func (s *Store) Write(ctx context.Context, op *cas.Op) error {
	if err := s.wait(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.apply(op)
}

// Batch performs ops, each as Get or Write would, after one injected
// latency for the whole batch. A cancelled context fails the batch.
func (s *Store) Batch(ctx context.Context, ops []*cas.Op) error {
	if err := s.wait(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, op := range ops {
		op.Result = cas.Result{}
		if err := s.apply(op); err != nil {
			op.Result.Err = err
		}
	}
	return nil
}

// apply performs op and sets its Result; s.mu held.
func (s *Store) apply(op *cas.Op) error {
	r := &op.Result
	e, found := s.live(op.Key)
	switch op.Kind {
	case cas.OpGet:
		if found {
			r.Found, r.Data, r.Ver = true, append([]byte(nil), e.data...), e.ver
		}
		return nil
	case cas.OpInsert:
		r.Written = !found
	case cas.OpReplace:
		r.Written = found && e.ver == op.Ver
	default:
		return errors.New("memstore: unknown operation kind " + strconv.Itoa(int(op.Kind)))
	}
	if !r.Written {
		r.Current = true
		if found {
			r.Found, r.Data, r.Ver = true, append([]byte(nil), e.data...), e.ver
		}
		return nil
	}
	s.put(op.Key, op.Data, op.TTL)
	r.Ver = s.next
	return nil
}

// Delete removes key.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := s.wait(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	delete(s.entries, key)
	s.mu.Unlock()
	return nil
}

// Len returns the number of live entries.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for k := range s.entries {
		if _, ok := s.live(k); ok {
			n++
		}
	}
	return n
}

// TTL returns the time left before key expires, 0 for no expiry, and false
// when key is absent.
func (s *Store) TTL(key string) (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.live(key)
	if !ok {
		return 0, false
	}
	if e.expires == 0 {
		return 0, true
	}
	return time.Duration(e.expires - s.clock.Now()), true
}
