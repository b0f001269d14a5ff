package olric

import (
	"sync/atomic"

	"github.com/bucketgrid/bucketgrid/core/wire"
	"github.com/bucketgrid/bucketgrid/grid/olric/internal/frame"
)

// leaseRecord is what an owner keeps, in memory, of the leases it granted
// on one key (see "Token leases" in the package documentation, "The
// fence").
type leaseRecord struct {
	// gen is the key's lease generation: every lease granted carries it,
	// and a give-back carrying another is dropped. A fence sets a new one.
	gen uint64
	// liveUntil is the m.mono instant from which no lease granted on the
	// key is used any more: the grant's execution plus the Lifetime the
	// grant allowed, later than its holder's own end.
	liveUntil int64
	// blocked is the m.mono instant until which no lease is granted on the
	// key, set by a fence waiting for liveUntil.
	blocked int64
}

// epochSeen is the first execution of this member in one epoch of a
// partition, m.mono.
type epochSeen struct {
	epoch uint64
	at    int64
}

// fenceRecords is the owner side of leases: the key records (in each
// stripe, under its lock), the generation counter and the start of each
// partition's epoch.
type fenceRecords struct {
	life  int64 // the Lifetime this owner allows a lease
	limit int   // records per stripe
	gens  atomic.Uint64
	seen  []atomic.Pointer[epochSeen]
}

func newFenceRecords(cfg LeaseConfig, partitions uint64, stripes int) *fenceRecords {
	return &fenceRecords{life: int64(cfg.Lifetime), limit: max(cfg.MaxKeys/max(stripes, 1), 1),
		seen: make([]atomic.Pointer[epochSeen], partitions)}
}

// since returns when this member first executed for partition p in epoch
// (m.mono), noting now when this is the first time.
func (f *fenceRecords) since(p, epoch uint64, now int64) int64 {
	s := f.seen[p].Load()
	for s == nil || s.epoch != epoch {
		n := &epochSeen{epoch: epoch, at: now}
		if f.seen[p].CompareAndSwap(s, n) {
			return now
		}
		s = f.seen[p].Load()
	}
	return s.at
}

// fence decides whether req (nil: a removal) on key, found as stored, may
// run now (m.mono) in partition p's epoch. An operation that can give the
// bucket tokens otherwise than by refill (see fences) waits, answered
// frame.KindHold, until no lease it does not know of and none of the key's
// leases it granted can still be used: until Lifetime after this member's
// first execution in the epoch, and until the key's record's liveUntil,
// with no lease granted on the key meanwhile. When it runs, the key's
// generation changes, so that give-backs of leases granted before it are
// dropped. Called with st's lock held.
func (f *fenceRecords) fence(st *stripe, key string, p, epoch uint64, now int64, req *wire.Request, stored []byte) (outcome, bool) {
	since := f.since(p, epoch, now)
	rec := st.leased[key]
	if rec == nil && now-since >= f.life {
		return outcome{}, false
	}
	if !fences(req, stored) {
		return outcome{}, false
	}
	wait := since + f.life - now
	if rec != nil && rec.liveUntil > now {
		rec.blocked = rec.liveUntil
		wait = max(wait, rec.liveUntil-now)
	}
	if wait > 0 {
		return outcome{kind: frame.KindHold, hold: wait}, true
	}
	if rec != nil {
		rec.gen = f.gens.Add(1)
	}
	return outcome{}, false
}

// record returns key's record for a lease request at now (m.mono),
// creating it; nil when the stripe holds limit records of leases still in
// use, and then no lease is granted. Called with st's lock held.
func (f *fenceRecords) record(st *stripe, key string, now int64) *leaseRecord {
	if rec := st.leased[key]; rec != nil {
		return rec
	}
	if st.leased == nil {
		st.leased = map[string]*leaseRecord{}
	}
	if len(st.leased) >= f.limit {
		// Forget a record whose leases have all ended (its give-backs are
		// then dropped); a few tries, in the map's random order.
		tries := 0
		for k, r := range st.leased {
			if r.liveUntil <= now && r.blocked <= now {
				delete(st.leased, k)
				break
			}
			if tries++; tries == 8 {
				return nil
			}
		}
		if len(st.leased) >= f.limit {
			return nil
		}
	}
	rec := &leaseRecord{gen: f.gens.Add(1)}
	st.leased[key] = rec
	return rec
}

// fences reports whether req (nil: a removal) may give the bucket stored
// tokens otherwise than by refill: a removal, a reset, an addition, a
// replacement of the configuration that changes anything (explicit, or
// implicit by a newer configuration version), or a bucket that does not
// decode. Creating an absent bucket does not fence.
func fences(req *wire.Request, stored []byte) bool {
	if req == nil {
		return true
	}
	replaces := req.Config != nil && (req.Mode == wire.ModeCreateOrReplace || req.Mode == wire.ModeReconstruct)
	for i := range req.Ops {
		switch req.Ops[i].Kind {
		case wire.OpAddTokens, wire.OpForceAddTokens, wire.OpReset:
			return true
		case wire.OpReplaceConfiguration:
			replaces = true
		}
	}
	if !replaces || len(stored) == 0 {
		return false
	}
	b, err := wire.DecodeState(stored)
	if err != nil {
		return true
	}
	if req.Config != nil && (req.Mode == wire.ModeCreateOrReplace || req.Mode == wire.ModeReconstruct) && req.ConfigVersion > b.ConfigVersion {
		return true
	}
	for i := range req.Ops {
		if op := &req.Ops[i]; op.Kind == wire.OpReplaceConfiguration && !replacesNothing(op, &b) {
			return true
		}
	}
	return false
}
