// Package fence owns the owner side of grid/olric's token leases: the
// record an owner keeps of the leases it granted on a key (Record), and the
// fence (Table.Hold) that makes an operation able to give a bucket tokens
// otherwise than by refill wait until no lease granted before it can still
// be used (see "Token leases" and "The fence" in grid/olric's package
// documentation). The leases themselves, their grants and give-backs
// belong to grid/olric.
package fence

import (
	"sync/atomic"

	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/core/wire"
)

// Record is what an owner keeps, in memory, of the leases it granted on
// one key. Its fields are read and written under the lock of the key's
// stripe.
type Record struct {
	// Gen is the key's lease generation: every lease granted carries it,
	// and a give-back carrying another is dropped. A fence sets a new one.
	Gen uint64
	// LiveUntil is the owner's monotonic instant from which no lease
	// granted on the key is used any more: the grant's execution plus the
	// Lifetime the grant allowed, later than its holder's own end.
	LiveUntil int64
	// Blocked is the owner's monotonic instant until which no lease is
	// granted on the key, set by a fence waiting for LiveUntil.
	Blocked int64
}

// Records are the records of one stripe's keys.
type Records map[string]*Record

// epochSeen is the first execution of this owner in one epoch of a
// partition, on the owner's monotonic clock.
type epochSeen struct {
	epoch uint64
	at    int64
}

// Table is the owner side of leases: the bound on the records of a
// stripe, the generation counter and the start of each partition's epoch.
// It is safe for concurrent use; the Records it is handed are guarded by
// their stripe's lock.
type Table struct {
	life  int64 // the Lifetime this owner allows a lease, nanoseconds
	limit int   // records per stripe
	gens  atomic.Uint64
	seen  []atomic.Pointer[epochSeen]
}

// New returns a Table for leases of at most life nanoseconds, keeping up to
// maxKeys records over stripes stripes, for partitions partitions.
func New(life int64, maxKeys int, partitions uint64, stripes int) *Table {
	return &Table{life: life, limit: max(maxKeys/max(stripes, 1), 1),
		seen: make([]atomic.Pointer[epochSeen], partitions)}
}

// Life returns the Lifetime this owner allows a lease, nanoseconds.
func (f *Table) Life() int64 { return f.life }

// since returns when this owner first executed for partition p in epoch,
// noting now when this is the first time.
func (f *Table) since(p, epoch uint64, now int64) int64 {
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

// Hold decides whether req (nil: a removal) on key, found as stored, may
// run now (the owner's monotonic clock) in partition p's epoch, rs being
// the records of key's stripe. An operation that can give the bucket
// tokens otherwise than by refill (see fences) waits, held for wait
// nanoseconds, until no lease this owner does not know of and none of the
// key's leases it granted can still be used: until Lifetime after this
// owner's first execution in the epoch, and until the key's record's
// LiveUntil, with no lease granted on the key meanwhile. When it runs, the
// key's generation changes, so that give-backs of leases granted before it
// are dropped. Called with the stripe's lock held.
func (f *Table) Hold(rs Records, key string, p, epoch uint64, now int64, req *wire.Request, stored []byte) (wait int64, held bool) {
	since := f.since(p, epoch, now)
	rec := rs[key]
	if rec == nil && now-since >= f.life {
		return 0, false
	}
	if !fences(req, stored) {
		return 0, false
	}
	wait = since + f.life - now
	if rec != nil && rec.LiveUntil > now {
		rec.Blocked = rec.LiveUntil
		wait = max(wait, rec.LiveUntil-now)
	}
	if wait > 0 {
		return wait, true
	}
	if rec != nil {
		rec.Gen = f.gens.Add(1)
	}
	return 0, false
}

// Record returns key's record for a lease request at now (the owner's
// monotonic clock), creating it in *rs; nil when the stripe holds as many
// records of leases still in use as the Table allows, and then no lease is
// granted. Called with the stripe's lock held.
func (f *Table) Record(rs *Records, key string, now int64) *Record {
	if rec := (*rs)[key]; rec != nil {
		return rec
	}
	if *rs == nil {
		*rs = Records{}
	}
	if len(*rs) >= f.limit {
		// Forget a record whose leases have all ended (its give-backs are
		// then dropped); a few tries, in the map's random order.
		tries := 0
		for k, r := range *rs {
			if r.LiveUntil <= now && r.Blocked <= now {
				delete(*rs, k)
				break
			}
			if tries++; tries == 8 {
				return nil
			}
		}
		if len(*rs) >= f.limit {
			return nil
		}
	}
	rec := &Record{Gen: f.gens.Add(1)}
	(*rs)[key] = rec
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
		if op := &req.Ops[i]; op.Kind == wire.OpReplaceConfiguration && !ReplacesNothing(op, &b) {
			return true
		}
	}
	return false
}

// ReplacesNothing reports whether a replacement leaves view as it is (see
// wire.OpReplaceConfiguration).
func ReplacesNothing(op *wire.Op, view *core.State) bool {
	if op.Config == nil || op.Inheritance == core.InheritReset || !view.Config.Equal(op.Config) {
		return false
	}
	for i := range view.Bands {
		if view.Bands[i].Size > view.Config.Bandwidths[i].Capacity {
			return false
		}
	}
	return true
}
