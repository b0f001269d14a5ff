package olric

import (
	"context"
	"slices"
	"time"

	"github.com/bucketgrid/bucketgrid/grid/olric/internal/frame"
	"github.com/bucketgrid/bucketgrid/grid/olric/internal/journal"
)

// shipJournal starts sending the journal to the buckets' owners, unless it
// is empty or already being sent. Called after a routing read in which no
// known member is missing.
func (m *Member) shipJournal() {
	if m.ctx.Err() != nil || !m.journal.StartShipping() {
		return
	}
	m.wg.Go(func() {
		defer m.journal.DoneShipping()
		// Every journaled bucket merges into its owner's state (this
		// member's own included: Olric moved the other side's copy in
		// meanwhile).
		m.journal.Ship(m.ctx, m.cfg.Clock.Now, func(key string, payload []byte) error {
			ctx, cancel := context.WithTimeout(m.ctx, m.cfg.RequestTimeout)
			defer cancel()
			_, err := m.do(ctx, key, nil, frame.KindMerge, payload)
			return err
		})
	})
}

// execMerge merges a bucket state from another side of a split (payload:
// uvarint TTL nanoseconds, the state as its side stored it, lineage
// included) into key's bucket as its owner, by journal.Merge: the owner's
// state less the consumption the incoming one holds and it does not. The
// merged bucket lives as long as the longer of the two, and at least
// until it is full again, so that no consumption expires with it.
func (oe *ownerExec) execMerge(ctx context.Context, key string, h uint64, payload []byte, b bound) outcome {
	ttl, incoming, err := frame.Uvarint(payload)
	if err != nil || len(incoming) == 0 {
		return outcome{kind: frame.KindError, err: frame.ErrMalformed}
	}
	b.merge = true
	o, refused, ok := oe.hold(ctx, h, b)
	if !ok {
		return refused
	}
	defer oe.release(&o)
	s, failed, ok := oe.read(&o, key)
	if !ok {
		return failed
	}
	now := oe.m.cfg.Clock.Now()
	merged, changed := journal.Merge(s.stored, incoming, now)
	if !changed {
		if s.stored == nil {
			return outcome{kind: frame.KindOK, removed: true}
		}
		// Written again all the same: Olric keeps, of the copies it moves
		// together after a heal, the one written last, and a copy of the
		// other side not yet moved here must not replace this one once
		// this merge's journal is gone (that side's journal still comes).
		if err := oe.write(&o, key, s.stored, oe.ttlLeft(&o, key, s)); err != nil {
			return outcome{kind: frame.KindError, err: err, retry: true}
		}
		return outcome{kind: frame.KindOK, removed: true}
	}
	life := int64(ttl)
	if life != 0 && s.stored != nil {
		if left := oe.ttlLeft(&o, key, s); left == 0 {
			life = 0
		} else {
			life = max(life, left)
		}
	}
	if life != 0 {
		life = max(life, journal.TimeToFull(merged, now))
	}
	merged = slices.Clone(merged) // may be the connection's read buffer; the cache keeps it
	if err := oe.write(&o, key, merged, life); err != nil {
		return outcome{kind: frame.KindError, err: err, retry: true}
	}
	return outcome{kind: frame.KindOK, removed: true}
}

// ttlLeft returns the nanoseconds key's entry s has left to live under o
// (0 for forever, at least 1 otherwise).
func (oe *ownerExec) ttlLeft(o *ownerHold, key string, s ownedState) int64 {
	if s.cached {
		c := o.st.cache[key]
		if c.expires == 0 {
			return 0
		}
		return max(c.expires-oe.m.mono(), 1)
	}
	if s.expiresAt == 0 {
		return 0
	}
	return max(int64(time.Until(time.UnixMilli(s.expiresAt))), 1)
}
