package olric

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bucketgrid/bucketgrid/grid/olric/internal/fence"
	"github.com/bucketgrid/bucketgrid/grid/olric/internal/frame"
	"github.com/bucketgrid/bucketgrid/grid/olric/internal/journal"
	olricdb "github.com/olric-data/olric"
)

// ownerExec is the owner side of execution: the per-key stripes (locks
// with the cache of the buckets they guard), the gate Shutdown drains, and
// the count of executions that outlived their callers (bounded.go).
type ownerExec struct {
	m       *Member
	stripes []stripe
	// gate is read-held by every owner-side execution; drain takes it
	// after setting leaving, so it waits for executions in flight.
	gate    sync.RWMutex
	leaving atomic.Bool
	// detached counts owner-side executions still running after their
	// callers stopped waiting (execBounded); detachLimit, when not 0,
	// replaces maxDetached (tests).
	detached    atomic.Int64
	detachLimit atomic.Int64
	// wideReads counts the rounds of readWide (tests: what the create
	// path costs).
	wideReads atomic.Int64
	// resync writes back the buckets of partitions whose owner or backups
	// changed, so that every backup holds them (resync.go).
	resync resyncer
	// dropped is set once the cache lost an entry that Olric may still
	// hold (a full stripe's, or a write or removal that failed): from then
	// on a key absent from the cache is read from Olric (whole).
	dropped atomic.Bool
	// olricReads counts the Gets of buckets and lost marks executions
	// made (tests).
	olricReads atomic.Int64
}

// drain stops owner-side execution (hold answers frame.KindHold from now
// on) and waits for the executions in flight, or until ctx ends.
func (oe *ownerExec) drain(ctx context.Context) {
	oe.leaving.Store(true)
	drained := make(chan struct{})
	go func() {
		oe.gate.Lock()
		//lint:ignore SA2001 the empty critical section is the drain barrier: Lock returns once every owner-side execution (a read holder) has left.
		oe.gate.Unlock()
		close(drained)
	}()
	select {
	case <-drained:
	case <-ctx.Done():
	}
}

// ownerHold is an owner-side execution's hold on one key: the member's
// gate (read-held) and the key's stripe lock, under a routing read in which
// this member owns the key's partition and may execute for it now.
type ownerHold struct {
	st    *stripe
	r     *routes
	p     uint64 // the key's partition
	epoch uint64 // the partition's epoch in r
	now   int64  // m.mono when the hold was taken
	// ctx bounds the execution's Olric calls: the caller's context, or the
	// routing read's lease when that ends first, so that no call lands
	// after the next owner took over.
	ctx context.Context
}

// bound is how long an owner-side execution may still start: its caller
// waits until notAfter (m.mono nanoseconds; 0 for as long as the context
// lets it) and no longer. try asks hold not to wait for the key's stripe
// lock (see execBounded).
type bound struct {
	notAfter int64
	try      bool
	// merge: the execution is a journal merge (execMerge), which may run
	// during the guard of a stale self-read (routes.staleUntil).
	merge bool
}

// hold takes the gate and the stripe lock of the key hashed h, then checks
// that this member owns the key's partition in its newest routing read and
// may execute for it now. If so it returns the hold (end it with
// m.release); if not, it returns false with the outcome to answer, holding
// nothing: frame.KindNotOwner when another member owns the key, frame.KindHold during a
// hand-over, on a stale routing read or while shutting down, frame.KindNoQuorum
// without a quorum, kindBusy when b.try and the stripe is locked, and an
// error when the caller stopped waiting (ctx ended or b.notAfter passed)
// while hold waited for the lock: nothing runs for a caller that left.
func (oe *ownerExec) hold(ctx context.Context, h uint64, b bound) (ownerHold, outcome, bool) {
	m := oe.m
	oe.gate.RLock()
	if oe.leaving.Load() {
		oe.gate.RUnlock()
		return ownerHold{}, outcome{kind: frame.KindHold, hold: int64(m.cfg.RoutingRefresh)}, false
	}
	p := h % m.cfg.PartitionCount
	st := &oe.stripes[(h>>32)%uint64(len(oe.stripes))]
	if !b.try {
		st.mu.Lock()
	} else if !st.mu.TryLock() {
		oe.gate.RUnlock()
		return ownerHold{}, outcome{kind: kindBusy}, false
	}
	r, now := m.routing.current(), m.mono()
	if err := ctx.Err(); err != nil || (b.notAfter != 0 && now >= b.notAfter) {
		st.mu.Unlock()
		oe.gate.RUnlock()
		if err == nil {
			err = errExpired
		}
		return ownerHold{}, outcome{kind: frame.KindError, err: err}, false
	}
	if o, ok := oe.mayExecute(r, p, now, b.merge); !ok {
		st.mu.Unlock()
		oe.gate.RUnlock()
		return ownerHold{}, o, false
	}
	if d, ok := ctx.Deadline(); !ok || !d.Before(r.leaseEnd) {
		ctx = r.lease
	}
	return ownerHold{st: st, r: r, p: p, epoch: r.epoch[p], now: now, ctx: ctx}, outcome{}, true
}

// mayExecute checks, under the partition's stripe lock, whether this
// member may execute for partition p at now (m.mono) under routing read r;
// see hold. A merge passes the guard of a stale self-read: it only
// subtracts consumption, and it is how the others' consumption during the
// gap reaches this member before its clients spend the same tokens again.
func (oe *ownerExec) mayExecute(r *routes, p uint64, now int64, merge bool) (outcome, bool) {
	m := oe.m
	if r == nil { // still starting
		return outcome{kind: frame.KindHold, hold: int64(m.cfg.RoutingRefresh)}, false
	}
	if r.owners[p] != m.name {
		m.routing.kick()
		return outcome{kind: frame.KindNotOwner}, false
	}
	if now-r.start >= int64(m.cfg.RoutingLease) {
		m.routing.kick()
		return outcome{kind: frame.KindHold, hold: int64(m.cfg.RoutingRefresh / 4)}, false
	}
	if g := r.guardUntil[p]; now < g && !(merge && g <= r.staleUntil) {
		return outcome{kind: frame.KindHold, hold: g - now}, false
	}
	if !r.quorum {
		return outcome{kind: frame.KindNoQuorum}, false
	}
	return outcome{}, true
}

// release ends a hold.
func (oe *ownerExec) release(o *ownerHold) {
	o.st.mu.Unlock()
	oe.gate.RUnlock()
}

// ownedState is a bucket's state as its owner reads it.
type ownedState struct {
	state []byte // core's state; nil when the bucket does not exist
	// stored is what Olric holds: state, with its lineage when it was
	// written during a split (internal/journal); lineage is that lineage.
	stored  []byte
	lineage journal.Lineage
	// expiresAt is when the Olric entry expires, Unix milliseconds (0 for
	// never, or when cached).
	expiresAt int64
	cached    bool // the state came from the owner's cache, not Olric
}

// read returns key's state under o: the cached copy while it is valid,
// else Olric's; absent, without asking Olric, for a key the cache never
// held while it holds all of Olric's buckets (whole). failed reports an
// error outcome to answer with.
//
// A bucket Olric reports absent is read once more when another member
// holds data of its partition. Olric's Get asks every holder at once and
// drops any answer that fails, and its balancer moves a holder's fragment
// by copying it to the destination and only then deleting it: a Get whose
// question reached the destination before the copy and the source after
// the deletion finds nothing (TestCrash, ReplicaCount 2: the backup that
// became the owner moving its backup copy to the new backup; the bucket
// then started full). Once such a Get has returned,
// the deletion, and so the copy, is done: a second Get finds the bucket at
// the destination, which the owner's Olric table lists, unless it moved
// again in between.
func (oe *ownerExec) read(o *ownerHold, key string) (s ownedState, failed outcome, ok bool) {
	m := oe.m
	stored, hit, known := o.st.get(key, o.epoch, o.now)
	if hit {
		s := ownedState{stored: stored, cached: true}
		s.lineage, s.state = journal.Unwrap(stored)
		return s, outcome{}, true
	}
	if !known && oe.whole() {
		return ownedState{}, outcome{}, true
	}
	oe.olricReads.Add(1)
	gr, err := m.node.dm.Get(o.ctx, key)
	if errors.Is(err, olricdb.ErrKeyNotFound) && oe.othersHold(o.r, o.p) {
		oe.olricReads.Add(1)
		gr, err = m.node.dm.Get(o.ctx, key)
	}
	switch {
	case errors.Is(err, olricdb.ErrKeyNotFound):
		return ownedState{}, outcome{}, true
	case err != nil:
		return ownedState{}, outcome{kind: frame.KindError, err: err, retry: true}, false
	}
	if s.stored, err = gr.Byte(); err != nil {
		return ownedState{}, outcome{kind: frame.KindError, err: err}, false
	}
	s.lineage, s.state = journal.Unwrap(s.stored)
	s.expiresAt = gr.TTL()
	return s, outcome{}, true
}

// whole reports whether every bucket in this member's Olric is in its
// cache: no other member was ever heard of (node.others), so this member
// wrote every bucket there, and each write it made is cached (see write
// and replicate), the cache never having dropped one since (dropped).
// Olric then holds no bucket the cache does not name, and a key the cache
// never held needs no Get: a new bucket's first check, the common one
// with many descriptors, costs one Put instead of two Gets and a Put
// (the other Get is the partition's lost mark: lostMarks.lostAt).
func (oe *ownerExec) whole() bool {
	return oe.m.cfg.CacheEntries > 0 && !oe.m.node.others.Load() && !oe.dropped.Load()
}

// othersHold reports whether r names a member other than this one among
// the data holders of partition p.
func (oe *ownerExec) othersHold(r *routes, p uint64) bool {
	m := oe.m
	for h := range strings.SplitSeq(r.holders[p], ",") {
		if h != m.name {
			return true
		}
	}
	return false
}

// write stores key's new state under o (as stored: lineage included),
// expiring after ttl nanoseconds (0 for never), and caches it. The cache keeps state: the caller must not
// change it afterwards.
func (oe *ownerExec) write(o *ownerHold, key string, state []byte, ttl int64) error {
	m := oe.m
	var err error
	if ttl > 0 {
		err = m.node.dm.Put(o.ctx, key, state, olricdb.PX(time.Duration(ttl)))
	} else {
		err = m.node.dm.Put(o.ctx, key, state)
	}
	if err != nil {
		// The Put may have landed all the same.
		delete(o.st.cache, key)
		oe.dropped.Store(true)
		return err
	}
	if m.cfg.CacheEntries > 0 {
		expires := int64(0)
		if ttl > 0 {
			expires = m.mono() + ttl
		}
		oe.cache(o.st, key, cached{state: state, epoch: o.epoch, expires: expires})
	}
	return nil
}

// cache caches a state this member wrote in stripe st (mu held), noting a
// dropped entry (see whole).
func (oe *ownerExec) cache(st *stripe, key string, c cached) {
	if st.put(key, c, oe.m.cfg.CacheEntries/len(oe.stripes)) {
		oe.dropped.Store(true)
	}
}

// stripe is one per-key lock with the cache of the buckets it guards.
type stripe struct {
	mu    sync.Mutex
	cache map[string]cached
	// leased holds the records of the leases this member granted on the
	// stripe's keys (internal/fence); nil with leases off.
	leased fence.Records
}

// cached is the last state this member wrote for a bucket it owns. The
// owner is the only writer of its buckets, so the copy equals the Olric
// entry for as long as the member keeps owning the partition (epoch) and
// the entry lives (expires, m.mono nanoseconds; 0 for never).
type cached struct {
	state   []byte
	epoch   uint64
	expires int64
}

// get returns the cached state of key if still valid (hit), and whether
// the cache holds an entry for key at all, valid or not (known). Called
// with mu held.
func (s *stripe) get(key string, epoch uint64, now int64) (state []byte, hit, known bool) {
	c, ok := s.cache[key]
	if !ok {
		return nil, false, false
	}
	if c.epoch != epoch || (c.expires != 0 && now >= c.expires) {
		return nil, false, true
	}
	return c.state, true, true
}

// put caches a state, dropping an arbitrary entry when the stripe holds
// limit entries, and reports whether it dropped one. Called with mu held.
func (s *stripe) put(key string, c cached, limit int) (dropped bool) {
	if s.cache == nil {
		s.cache = map[string]cached{}
	}
	if _, ok := s.cache[key]; !ok && len(s.cache) >= max(limit, 1) {
		for k := range s.cache {
			delete(s.cache, k)
			dropped = true
			break
		}
	}
	s.cache[key] = c
	return dropped
}
