package olric

import (
	"context"
	"encoding/binary"
	"slices"
	"strings"
	"time"

	"github.com/bucketgrid/bucketgrid/grid/olric/internal/frame"
)

// The release proof: how a member ends the hand-over guard a split's end
// set (refresh: the end of a split in which another side may have
// declared it dead, or a stale self-read) before HandoverGrace, on proof
// rather than on time. The guard waits until no other member can still
// execute the partition under a routing read that gave it the partition;
// the member asks every other member instead (frame.KindRelease), and
// each answers, per partition, whether an execution of it is in flight
// (then it may still execute: ask again), else until when an execution of
// it that ended with an error may still have a store call landing (its
// read's lease end), how many of the partition's buckets its split
// journal still holds unmerged, and whether it executed the partition
// with a whole view since its latest split began (it was handed to it
// and back: a move, guarded whole). A member whose newest read, perhaps
// a stale one, makes it the owner revokes the partition for
// HandoverGrace before it answers, as if it moved away and back. Only a
// partition the asker owned before its latest split began is asked
// about: the other side took it over at most. A
// partition's guard ends for journal merges once every member proved it
// released, and for everything once, besides, no member (this one
// included) holds a bucket of it unmerged: the other side's consumption
// is in the state before this member's clients draw again. Without every
// answer the guard stands its HandoverGrace (fail safe).
//
// Why an answer proves it. An owner-side execution counts itself in the
// partition's partTrack before it loads the routing read it runs under
// (hold), and uncounts itself when it ended (release) or was refused; the
// answer loads the newest read first and reads the count after (atomics,
// sequentially consistent), after it revoked the partition if that read
// makes it the owner. A count of 0 then means that every execution that
// counted itself before has ended, and any that counts itself after
// loads that read or a newer one and sees the revocation: one that does
// not make the member the owner refuses it, one that does holds for the
// revocation, and a newer one that gives it the partition again is a
// hand-over to it, which it guards like any other. An execution that ended cleanly
// has had its store calls answered; one that ended with an error may
// have left one in flight, bounded by its read's lease (its context), so
// the answer says when that ends.

// releasePoll is how often a member asks again for a release proof it
// lacks, and how long a caller held by a guard whose proof is being
// sought waits before trying again.
const releasePoll = 20 * time.Millisecond

// proof is what the release proofs of the latest round established; a
// proof value is immutable once published (router.proof).
type proof struct {
	// cover: the guards the proofs apply to end at or before cover (they
	// were set by reads that returned before the round asked).
	cover int64
	// asking: the round is still asking (held callers try again soon).
	asking bool
	// in[p]: the round asks about partition p.
	in []bool
	// released[p] is when (m.mono) every other member's executions of
	// partition p surely ended, cleared[p] when, besides, every journaled
	// bucket of p had merged; 0 while unproven.
	released, cleared []int64
}

// wait returns how long proof pf still holds partition p, guarded until
// g, at now (m.mono), for a merge or for any execution: 0 when the proof
// ended the guard; until the proof's time when it is proven for later
// (an execution's store call may still land until then); releasePoll at
// most while a round still asks for it; else until g.
func (pf *proof) wait(p uint64, g, now int64, merge bool) int64 {
	if pf == nil || g > pf.cover {
		return g - now
	}
	at := pf.cleared[p]
	if merge {
		at = pf.released[p]
	}
	switch {
	case at != 0:
		return min(max(at-now, 0), g-now)
	case pf.asking && pf.in[p]:
		return min(g-now, int64(releasePoll))
	}
	return g - now
}

// answerRelease appends to dst the answer to a release request (id;
// payload: uvarint count, the partitions) from another member; see
// frame.KindRelease.
func (oe *ownerExec) answerRelease(dst []byte, id uint64, payload []byte) []byte {
	m := oe.m
	parts, err := parseParts(payload, m.cfg.PartitionCount)
	if err != nil {
		return appendErrorFrame(dst, id, err)
	}
	start := len(dst)
	r := m.routing.current()
	if r == nil || len(m.exec.track) == 0 {
		// Still starting.
		dst = frame.AppendHeader(dst, id, frame.KindHold)
		dst = binary.AppendUvarint(dst, uint64(releasePoll))
		return frame.Finish(dst, start)
	}
	dst = frame.AppendHeader(dst, id, frame.KindReleased)
	var counts map[uint64]int
	if m.journal.Len() > 0 {
		counts = map[uint64]int{}
		m.journal.Keys(func(key string) { counts[m.Partition(key)]++ })
		if !r.split {
			m.shipJournal()
		}
	}
	kick, splitAt := false, m.routing.splitAt.Load()
	for _, p := range parts {
		t := &m.exec.track[p]
		if r.owners[p] == m.name {
			// Its read, perhaps a stale one (the asker owned p before
			// the split), makes it the owner: it revokes the partition
			// for HandoverGrace, as if p moved away and back, so that it
			// executes p again only once its reads have settled.
			kick = true
			maxStore(&t.revoked, m.mono()+int64(m.cfg.HandoverGrace))
		}
		st := uint64(0)
		if t.inflight.Load() == 0 {
			st = 1 + uint64(max(t.dirty.Load()-m.mono(), 0))
		}
		// Executed with a whole view since this member's latest split
		// began (or ever, without one): the partition was handed to it
		// and back, a move the asker guards whole.
		moved := uint64(0)
		if w := m.exec.track[p].whole.Load(); w != 0 && w >= splitAt {
			moved = 1
		}
		dst = binary.AppendUvarint(dst, st)
		dst = binary.AppendUvarint(dst, uint64(counts[p]))
		dst = binary.AppendUvarint(dst, moved)
	}
	if kick {
		// The asker's read says it owns what this member's says it
		// owns: one of them is behind, perhaps this one.
		m.routing.kick()
	}
	names := m.members.known(m.name)
	for _, o := range r.owners {
		if o != "" && o != m.name && !slices.Contains(names, o) {
			names = append(names, o)
		}
	}
	names = names[:min(len(names), maxSeen)]
	dst = binary.AppendUvarint(dst, uint64(len(names)))
	for _, n := range names {
		dst = frame.AppendKey(dst, n)
	}
	if len(dst)-start-4 > frame.Max {
		return appendErrorFrame(dst[:start], id, frame.ErrMalformed)
	}
	return frame.Finish(dst, start)
}

// parseParts parses a release request's partitions, each below n.
func parseParts(payload []byte, n uint64) ([]uint64, error) {
	c, rest, err := frame.Uvarint(payload)
	if err != nil || c > n {
		return nil, frame.ErrMalformed
	}
	parts := make([]uint64, c)
	for i := range parts {
		if parts[i], rest, err = frame.Uvarint(rest); err != nil || parts[i] >= n {
			return nil, frame.ErrMalformed
		}
	}
	if len(rest) != 0 {
		return nil, frame.ErrMalformed
	}
	return parts, nil
}

// released is one member's answer to a release request, as the asker
// reads it: per partition asked, 0 when that member may still execute
// for it, else 1 plus the nanoseconds until its unfinished executions
// end; per partition, its journaled buckets not yet merged; the members
// it knows.
type released struct {
	state, pending []uint64
	moved          []bool
	names          []string
}

// parseReleased parses a frame.KindReleased payload answering a request
// for n partitions.
func parseReleased(payload []byte, n int) (released, error) {
	a := released{state: make([]uint64, n), pending: make([]uint64, n), moved: make([]bool, n)}
	var err error
	for i := range n {
		if a.state[i], payload, err = frame.Uvarint(payload); err != nil {
			return released{}, err
		}
		if a.pending[i], payload, err = frame.Uvarint(payload); err != nil {
			return released{}, err
		}
		var moved uint64
		if moved, payload, err = frame.Uvarint(payload); err != nil || moved > 1 {
			return released{}, frame.ErrMalformed
		}
		a.moved[i] = moved == 1
	}
	c, payload, err := frame.Uvarint(payload)
	if err != nil || c > maxSeen {
		return released{}, frame.ErrMalformed
	}
	for range c {
		var name string
		if name, payload, err = frame.Key(payload); err != nil {
			return released{}, err
		}
		a.names = append(a.names, name)
	}
	if len(payload) != 0 {
		return released{}, frame.ErrMalformed
	}
	return a, nil
}

// askRelease asks the member called name for the release proof of parts
// (see frame.KindRelease); hold is true when it answered to ask again.
func (pp *peerPool) askRelease(ctx context.Context, name string, parts []uint64, budget time.Duration) (a released, hold bool, err error) {
	p, err := pp.get(ctx, name)
	if err != nil {
		return released{}, false, err
	}
	raw := binary.AppendUvarint(nil, uint64(len(parts)))
	for _, q := range parts {
		raw = binary.AppendUvarint(raw, q)
	}
	r := p.call(ctx, frame.KindRelease, "", nil, raw, budget)
	switch {
	case r.err != nil:
		return released{}, false, r.err
	case r.kind == frame.KindHold:
		return released{}, true, nil
	case r.kind != frame.KindReleased:
		return released{}, false, frame.ErrMalformed
	}
	a, err = parseReleased(r.raw, len(parts))
	return a, false, err
}

// known returns the names of the members seen alive but self.
func (ms *membership) known(self string) []string {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	out := make([]string, 0, len(ms.seen))
	for name := range ms.seen {
		if name != self {
			out = append(out, name)
		}
	}
	return out
}

// prove starts a round of release proofs for the partitions nr guards
// (returned: when nr's read returned; prev: the read before it), replacing the round before, when
// one of the guards is newer than what that round covers. Called by
// refresh after it published nr, a read made with this member's view of
// the cluster whole (no member missing, a quorum).
func (rt *router) prove(prev, nr *routes, returned int64) {
	m := rt.m
	var parts []uint64
	until, uncovered := int64(0), false
	pf := rt.proof.Load()
	for p, g := range nr.guardUntil {
		if g > returned && nr.owners[p] == m.name && nr.kept[p] {
			parts = append(parts, uint64(p))
			until = max(until, g)
			uncovered = uncovered || pf == nil || g > pf.cover
		}
	}
	if !uncovered {
		return
	}
	if rt.proofCancel != nil {
		rt.proofCancel()
		rt.proofCancel = nil
	}
	if len(parts) == 0 || m.ctx.Err() != nil {
		return
	}
	ctx, cancel := context.WithDeadline(m.ctx, m.base.Add(time.Duration(until)))
	rt.proofCancel = cancel
	// Every member that may have executed a guarded partition: the
	// owners of this read and of the one before (a member that left the
	// table since, gracefully or declared dead, may still be running),
	// the members holding data of a guarded partition (one that owned it
	// in a gap between reads wrote there), and every member gossip saw.
	asked := map[string]bool{}
	add := func(name string) {
		if name != "" && name != m.name {
			asked[name] = true
		}
	}
	for p, o := range nr.owners {
		add(o)
		add(prev.owners[p])
	}
	for _, p := range parts {
		for name := range strings.SplitSeq(nr.history[p], ",") {
			add(name)
		}
	}
	for _, name := range m.members.known(m.name) {
		add(name)
	}
	m.wg.Go(func() {
		defer cancel()
		rt.runProof(ctx, parts, asked)
	})
}

// runProof asks the members named in asked (and any member an answer
// names) for the release proof of parts until every part is cleared or
// ctx ends (the guards ended, or a newer round began), publishing what is
// proven as it comes (router.proof) and kicking a routing read, which
// wakes the callers a guard held, whenever a partition's guard ends.
func (rt *router) runProof(ctx context.Context, parts []uint64, asked map[string]bool) {
	m := rt.m
	n := int(m.cfg.PartitionCount)
	pf := &proof{cover: m.mono() + int64(m.cfg.HandoverGrace), asking: true, in: make([]bool, n),
		released: make([]int64, n), cleared: make([]int64, n)}
	for _, p := range parts {
		pf.in[p] = true
	}
	rt.proof.Store(pf)
	// Per member: when each part's executions there surely end (0:
	// unproven), and its unmerged buckets of each part.
	type side struct {
		rel     []int64
		pending []uint64
		next    int64 // m.mono before which it is not asked again
	}
	// moved[i]: a member executed parts[i] with a whole view since its
	// latest split began (it was handed over and back): not provable.
	moved := make([]bool, len(parts))
	sides := map[string]*side{}
	for name := range asked {
		sides[name] = &side{rel: make([]int64, len(parts)), pending: make([]uint64, len(parts))}
	}
	for {
		type answer struct {
			name string
			a    released
			hold bool
			err  error
			at   int64
		}
		var ask []string
		for name, s := range sides {
			if s.next > m.mono() {
				continue
			}
			open := false
			for i := range parts {
				open = open || !moved[i] && (s.rel[i] == 0 || s.pending[i] > 0)
			}
			if open {
				ask = append(ask, name)
			}
		}
		answers := make(chan answer, len(ask))
		for _, name := range ask {
			go func() {
				actx, cancel := context.WithTimeout(ctx, m.cfg.RoutingRefresh)
				defer cancel()
				a, hold, err := m.peers.askRelease(actx, name, parts, m.cfg.RoutingRefresh)
				if err != nil && ctx.Err() == nil && m.members.refuses(name) {
					// Nothing listens where it ran: a dead process
					// executes nothing and holds no journal.
					err, a = nil, released{state: make([]uint64, len(parts)), pending: make([]uint64, len(parts)), moved: make([]bool, len(parts))}
					for i := range a.state {
						a.state[i] = 1
					}
				}
				answers <- answer{name: name, a: a, hold: hold, err: err, at: m.mono()}
			}()
		}
		for range ask {
			an := <-answers
			s := sides[an.name]
			if an.err != nil {
				// Perhaps a member of an older build, which closes the
				// connection (and fails what else it carried) on a
				// request it does not know: not again for a while.
				s.next = an.at + int64(m.cfg.RoutingRefresh)
			}
			if an.err != nil || an.hold {
				continue
			}
			for i, st := range an.a.state {
				if st > 0 && s.rel[i] == 0 {
					s.rel[i] = an.at + int64(st-1)
				}
				s.pending[i] = an.a.pending[i]
				moved[i] = moved[i] || an.a.moved[i]
			}
			for _, name := range an.a.names {
				if name != m.name && sides[name] == nil {
					sides[name] = &side{rel: make([]int64, len(parts)), pending: make([]uint64, len(parts))}
				}
			}
		}
		var own map[uint64]int
		if m.journal.Len() > 0 {
			own = map[uint64]int{}
			m.journal.Keys(func(key string) { own[m.Partition(key)]++ })
		}
		next := &proof{cover: pf.cover, asking: true, in: pf.in, released: slices.Clone(pf.released), cleared: slices.Clone(pf.cleared)}
		changed, newlyReleased, all := false, false, true
		for i, p := range parts {
			if moved[i] {
				continue // guarded whole (and not asked about again)
			}
			rel, clear := int64(1), own[p] == 0
			for _, s := range sides {
				if s.rel[i] == 0 {
					rel = 0
					break
				}
				rel = max(rel, s.rel[i])
				clear = clear && s.pending[i] == 0
			}
			if rel != 0 && next.released[p] == 0 {
				next.released[p], changed, newlyReleased = rel, true, true
			}
			if rel != 0 && clear && next.cleared[p] == 0 {
				next.cleared[p], changed = rel, true
			}
			all = all && next.cleared[p] != 0
		}
		next.asking = !all
		if changed || all {
			if ctx.Err() != nil {
				return // superseded, or the guards ended
			}
			if !rt.proof.CompareAndSwap(pf, next) {
				return // a newer round began
			}
			pf = next
			if newlyReleased {
				m.shipJournal()
			}
			rt.kick()
		}
		if all {
			return
		}
		t := time.NewTimer(releasePoll)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			if rt.proof.Load() == pf {
				done := *pf
				done.asking = false
				rt.proof.CompareAndSwap(pf, &done)
			}
			return
		}
	}
}
