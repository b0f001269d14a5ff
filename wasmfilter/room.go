package wasmfilter

// How an insert finds room: a free or expired slot among its probes, a
// directory entry to spare, or a bucket to evict.

import "time"

// makeRoom returns the directory entries without dead ones, with room for
// one more. When the directory is full it drops every entry whose slot no
// longer holds its key at its generation, and frees (by compare-and-swap)
// the slots of expired buckets before dropping their entries: a writer
// reusing an expired record in place compares that same token, so no record
// can come back to life behind the directory's back. If the directory is
// still full, it evicts the bucket closest to full (EvictOldest) or reports
// the table full. ok is false when an eviction lost a race.
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
	var (
		victim     dirEntry
		victimTok  uint32
		victimGen  uint32
		haveVictim bool
		soonest    int64
	)
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
		if rec.expires > 0 && (!haveVictim || rec.expires < soonest) {
			victim, victimTok, victimGen, haveVictim, soonest = e, token, rec.gen, true, rec.expires
		}
	}
	if len(kept) < directoryCap {
		return kept, true, nil
	}
	if !s.evict || !haveVictim {
		return nil, false, fullError(haveVictim, soonest, now)
	}
	ok, err = s.write(s.slotName(victim.slot), appendSlot(nil, victimGen, 0, "", nil), victimTok)
	if !ok || err != nil {
		return nil, false, err
	}
	s.evicted.Add(1)
	for i, e := range kept {
		if e == victim {
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

// claimable returns the slot an insert of h takes: the first free or
// expired one of its probes, or with EvictOldest the probed live bucket that
// expires first; prev is its current record.
func (s *Store) claimable(h keyHash, now int64) (slot, token uint32, prev slotRecord, err error) {
	var (
		best     uint32
		bestTok  uint32
		bestRec  slotRecord
		haveBest bool
	)
	for i := range s.probes {
		sl := h.probe(i, s.slots)
		rec, tok, err := s.readSlot(sl)
		if err != nil {
			return 0, 0, prev, err
		}
		if !rec.live(now) {
			return sl, tok, rec, nil
		}
		if !rec.foreign && rec.expires > 0 && (!haveBest || rec.expires < bestRec.expires) {
			best, bestTok, bestRec, haveBest = sl, tok, rec, true
		}
	}
	if !s.evict || !haveBest {
		return 0, 0, prev, fullError(haveBest, bestRec.expires, now)
	}
	return best, bestTok, bestRec, nil
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
