package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	olricdb "github.com/olric-data/olric"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/httplimit"
)

// Limit is the plan every API client gets, and its version. It lives in the
// grid itself (an Olric DMap of the embedded members), so a change made on
// any member reaches every member, which passes the version on with each
// bucket request: a bucket stored with an older version has its
// configuration replaced on its next request, tokens carried over
// proportionally (Bucket4j's implicit configuration replacement).
type Limit struct {
	Capacity        int64 `json:"capacity"`
	RefillPerMinute int64 `json:"refillPerMinute"`
	Version         int64 `json:"version"`
}

// maxLimit bounds what the form accepts, so a typo cannot make a bucket
// that takes hours to refill.
const maxLimit = 1_000_000

func (l Limit) validate() error {
	if l.Capacity < 1 || l.Capacity > maxLimit || l.RefillPerMinute < 1 || l.RefillPerMinute > maxLimit {
		return fmt.Errorf("capacity and refill per minute must be between 1 and %d", maxLimit)
	}
	return nil
}

// config is the bucket configuration of l: one greedy bandwidth named
// "minute", so that it matches itself across replacements.
func (l Limit) config() core.Config {
	return core.Config{Bandwidths: []core.Bandwidth{
		core.Greedy(l.Capacity, l.RefillPerMinute, time.Minute).WithID("minute")}}
}

// Names of the grid entries holding the limit. The lock is a DMap of its
// own: Olric stores a lock as a key of the DMap it locks.
const (
	limitDMap = "demo.limit"
	lockDMap  = "demo.limit.lock"
	limitKey  = "limit"
)

// limitStore reads and writes the Limit in the grid through one member's
// embedded client.
type limitStore struct {
	dm, lock olricdb.DMap
}

func newLimitStore(c *olricdb.EmbeddedClient) (*limitStore, error) {
	dm, err := c.NewDMap(limitDMap)
	if err != nil {
		return nil, err
	}
	lock, err := c.NewDMap(lockDMap)
	if err != nil {
		return nil, err
	}
	return &limitStore{dm: dm, lock: lock}, nil
}

var errNoLimit = errors.New("no limit stored")

func (s *limitStore) get(ctx context.Context) (Limit, error) {
	gr, err := s.dm.Get(ctx, limitKey)
	if errors.Is(err, olricdb.ErrKeyNotFound) {
		return Limit{}, errNoLimit
	}
	if err != nil {
		return Limit{}, err
	}
	b, err := gr.Byte()
	if err != nil {
		return Limit{}, err
	}
	var l Limit
	return l, json.Unmarshal(b, &l)
}

// init stores l as version 1 unless a limit is stored already (the first
// member to start wins) and returns the stored limit.
func (s *limitStore) init(ctx context.Context, l Limit) (Limit, error) {
	l.Version = 1
	b, _ := json.Marshal(l)
	if err := s.dm.Put(ctx, limitKey, b, olricdb.NX()); err != nil && !errors.Is(err, olricdb.ErrKeyFound) {
		return Limit{}, err
	}
	return s.get(ctx)
}

// set stores capacity and refill as the next version, under a grid lock so
// that two members changing the limit at once get different versions.
func (s *limitStore) set(ctx context.Context, capacity, refill int64) (Limit, error) {
	l := Limit{Capacity: capacity, RefillPerMinute: refill}
	if err := l.validate(); err != nil {
		return Limit{}, err
	}
	lc, err := s.lock.LockWithTimeout(ctx, limitKey, 5*time.Second, 5*time.Second)
	if err != nil {
		return Limit{}, fmt.Errorf("lock the limit: %w", err)
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		lc.Unlock(uctx)
	}()
	old, err := s.get(ctx)
	if err != nil && !errors.Is(err, errNoLimit) {
		return Limit{}, err
	}
	l.Version = old.Version + 1
	b, _ := json.Marshal(l)
	if err := s.dm.Put(ctx, limitKey, b); err != nil {
		return Limit{}, err
	}
	return l, nil
}

// planned is the httplimit.Buckets of one member: NewManaged buckets built
// for the newest Limit it has seen. A new Limit swaps in a new Managed whose
// bucket requests carry the new version.
type planned struct {
	mgr *bucketgrid.Manager
	mu  sync.Mutex // serialises apply
	cur atomic.Pointer[plannedLimit]
}

type plannedLimit struct {
	limit   Limit
	buckets *httplimit.Managed
}

func (p *planned) Take(ctx context.Context, key string, cost int64) (httplimit.Usage, error) {
	u, err := p.cur.Load().buckets.Take(ctx, key, cost)
	if v, ok := ctx.Value(versionKey{}).(*atomic.Int64); ok && err == nil {
		v.Store(u.ConfigVersion)
	}
	return u, err
}

// versionKey is the context key under which withLimitVersion leaves Take
// the place to record the version of the limit that answered.
type versionKey struct{}

// withLimitVersion makes every response of next say, in its Limit-Version
// header, which version of the limit decided the request: the version
// stored with the client's bucket, which a member still on an older limit
// also reports.
func withLimitVersion(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v := new(atomic.Int64)
		vw := &versionWriter{ResponseWriter: w, v: v}
		next.ServeHTTP(vw, r.WithContext(context.WithValue(r.Context(), versionKey{}, v)))
	})
}

// versionWriter sets Limit-Version when the response's header is written.
type versionWriter struct {
	http.ResponseWriter
	v     *atomic.Int64
	wrote bool
}

func (w *versionWriter) WriteHeader(code int) {
	if !w.wrote {
		w.wrote = true
		if v := w.v.Load(); v > 0 {
			w.Header().Set("Limit-Version", strconv.FormatInt(v, 10))
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *versionWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// limit returns the Limit the member applies.
func (p *planned) limit() Limit { return p.cur.Load().limit }

// apply makes l the member's limit if it is newer than the current one.
func (p *planned) apply(l Limit) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if cur := p.cur.Load(); cur != nil && l.Version <= cur.limit.Version {
		return false
	}
	b := httplimit.NewManaged(p.mgr, httplimit.StaticPlan(l.config()),
		httplimit.WithBucketOptions(bucketgrid.WithConfigVersion(l.Version, core.InheritProportionally)))
	p.cur.Store(&plannedLimit{limit: l, buckets: b})
	return true
}
