package wasmfilter

// How an insert finds room: a free or expired slot among its probes, a
// directory entry to spare, or a bucket to evict.

import (
	"time"

	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/core/wire"
)

// makeRoom returns the directory entries without dead ones, with room for
// one more. When the directory is full it drops every entry whose slot no
// longer holds its key at its generation, and frees (by compare-and-swap)
// the slots of expired buckets before dropping their entries: a writer
// reusing an expired record in place compares that same token, so no record
// can come back to life behind the directory's back. If the directory is
// still full, it evicts the bucket closest to full of those it lists (see
// candidate; EvictOldest) or reports the table full. ok is false when an
// eviction lost a race.
func (s *Store) makeRoom(es []dirEntry, dead []int, now int64) (out []dirEntry, ok bool, err error) {
	out = make([]dirEntry, 0, len(es)+1)
	for i, e := range es {
		if len(dead) > 0 && dead[0] == i {
			dead = dead[1:]
			continue
		}
		out = append(out, e)
	}
	if len(out) < directoryCap {
		return out, true, nil
	}
	kept := out[:0]
	var victim candidate
	for _, e := range out {
		rec, token, err := s.readSlot(e.slot)
		if err != nil {
			return nil, false, err
		}
		if rec.foreign || rec.key == "" || rec.gen != e.gen || s.hash(rec.key).fp != e.fp {
			continue // the slot has changed hands: a dead entry
		}
		if !rec.live(now) {
			freed, err := s.write(s.slotName(e.slot), appendSlot(nil, rec.gen, 0, "", nil), token)
			if err != nil {
				return nil, false, err
			}
			if !freed {
				kept = append(kept, e) // written meanwhile: keep it
			}
			continue
		}
		kept = append(kept, e)
		victim.consider(s, e.slot, token, rec, now)
	}
	if len(kept) < directoryCap {
		return kept, true, nil
	}
	if !s.evict || !victim.ok {
		return nil, false, fullError(victim.ok, victim.soonest, now)
	}
	ok, err = s.write(s.slotName(victim.slot), appendSlot(nil, victim.rec.gen, 0, "", nil), victim.token)
	if !ok || err != nil {
		return nil, false, err
	}
	s.evicted.Add(1)
	for i, e := range kept {
		if e.slot == victim.slot && e.gen == victim.rec.gen {
			return append(kept[:i], kept[i+1:]...), true, nil
		}
	}
	return kept, true, nil
}

func fullError(known bool, soonest, now int64) error {
	e := &TableFullError{}
	if known {
		e.Wait = time.Duration(max(soonest-now, 0))
	}
	return e
}

// evictSample is the number of probes an insert examines while the table
// is known to be full (see claimable).
const evictSample = 2

// claimable returns the slot an insert of h takes: the first free or
// expired one of its probes, or with EvictOldest the probed live bucket
// closest to full; prev is its current record.
//
// An insert that examined every probe and found none free remembers that
// the table is full until the first of those buckets expires; until then
// inserts examine only evictSample probes, so that a new client at a full
// table costs a few reads rather than Probes of them. Their fullest bucket
// is evicted unless it is spent (see candidate): then every probe is
// examined after all, so a spent bucket is never given away while a probed
// bucket with tokens left exists.
func (s *Store) claimable(h keyHash, now int64) (slot, token uint32, prev slotRecord, err error) {
	s.mu.Lock()
	sampled := now < s.fullUntil
	s.mu.Unlock()
	n := s.probes
	if sampled {
		n = min(n, evictSample)
	}
	var best candidate
	for i := uint32(0); i < s.probes; i++ {
		if i == n {
			if !s.evict || !best.ok || !best.spent {
				break
			}
			n = s.probes // all sampled buckets are spent: look further
		}
		sl := h.probe(i, s.slots)
		rec, tok, err := s.readSlot(sl)
		if err != nil {
			return 0, 0, prev, err
		}
		if !rec.live(now) {
			return sl, tok, rec, nil
		}
		best.consider(s, sl, tok, rec, now)
	}
	if n == s.probes && best.ok {
		s.mu.Lock()
		s.fullUntil = best.soonest
		s.mu.Unlock()
	}
	if !s.evict || !best.ok {
		return 0, 0, prev, fullError(best.ok, best.soonest, now)
	}
	return best.slot, best.token, best.rec, nil
}

// candidate is the bucket an eviction would take among those examined:
// the fullest (the largest share of its capacity in its emptiest
// bandwidth), preferring any bucket that is not spent — one whose every
// bandwidth still holds the tokens a request takes — to a spent one, and
// of equals the one that expires first. soonest is the first expiry seen.
type candidate struct {
	ok          bool
	slot, token uint32
	rec         slotRecord
	share       float64
	spent       bool
	soonest     int64
}

// consider examines a live record of slot sl read with token tok.
func (c *candidate) consider(s *Store, sl, tok uint32, rec slotRecord, now int64) {
	if rec.foreign || rec.expires <= 0 {
		return
	}
	if !c.ok || rec.expires < c.soonest {
		c.soonest = rec.expires
	}
	share, spent := s.fullness(rec.data, now)
	if c.ok && (spent != c.spent && spent || spent == c.spent &&
		(share < c.share || share == c.share && rec.expires >= c.rec.expires)) {
		return
	}
	soonest := c.soonest
	*c = candidate{ok: true, slot: sl, token: tok, rec: rec, share: share, spent: spent, soonest: soonest}
}

// fullness returns the share of its capacity the emptiest bandwidth of the
// stored bucket holds at now (1: full), and whether some bandwidth holds
// fewer tokens than one request takes. A value this build
// cannot decode counts as empty but not spent.
func (s *Store) fullness(data []byte, now int64) (share float64, spent bool) {
	b, err := wire.DecodeState(data)
	if err != nil || len(b.Bands) != len(b.Config.Bandwidths) {
		return 0, false
	}
	share = 1
	for i, bw := range b.Config.Bandwidths {
		one := core.State{Config: core.Config{Bandwidths: b.Config.Bandwidths[i : i+1]}, Bands: b.Bands[i : i+1]}
		avail := one.AvailableTokens(now)
		spent = spent || avail < s.cost
		share = min(share, float64(avail)/float64(bw.Capacity))
	}
	return share, spent
}

// release frees slot if it still holds key at gen: an unpublished claim.
func (s *Store) release(slot uint32, key string, gen uint32) {
	rec, token, err := s.readSlot(slot)
	if err == nil && !rec.foreign && rec.key == key && rec.gen == gen {
		_, _ = s.write(s.slotName(slot), appendSlot(nil, gen, 0, "", nil), token)
	}
}

// unlink removes the directory entry that gave slot to key at gen, if it is
// still there. Best effort: an entry left behind leads to a slot that no
// longer holds key at gen, which every reader recognises as dead.
func (s *Store) unlink(key string, slot, gen uint32) {
	h := s.hash(key)
	es, token, err := s.readDir(h.dir)
	if err != nil {
		return
	}
	for i, e := range es {
		if e.fp == h.fp && e.slot == slot && e.gen == gen {
			_, _ = s.write(s.dirName(h.dir), appendDirectory(nil, append(es[:i:i], es[i+1:]...)), token)
			return
		}
	}
}
