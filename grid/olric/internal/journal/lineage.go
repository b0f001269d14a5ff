package journal

import (
	"encoding/binary"
	"math"
	"math/rand/v2"

	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/core/wire"
)

// A Branch is one chain of writes of a bucket made during a split: the
// writes of one member, each reading the state the one before wrote, from
// the split's first to the last before the merge. ID names it (random,
// never 0); Consumed is what it consumed in all, counted from the state
// it started from: the common ancestor it shares with every other side.
type Branch struct {
	ID       uint64
	Consumed int64
}

// A Lineage lists the branches whose consumption a bucket state holds,
// at the count it holds each (at most MaxBranches, the oldest first). A
// state never written during a split has none. Two states of one bucket
// hold the same consumption where they list the same branch at the same
// count; what one lists beyond the other (a branch the other lacks, or a
// higher count) is consumption the other has not seen. Consumption made
// outside any split is in both, or only in the state written after it.
type Lineage []Branch

// MaxBranches bounds a lineage; beyond it the oldest branch is dropped,
// and a late merge of that branch counts it again (it may under-admit,
// never mint).
const MaxBranches = 8

// envelope is the first byte of a stored state that carries a lineage;
// core's states start with wire.FormatVersion.
const envelope = 0xb7

// Wrap returns what an owner stores for state with lineage l: state itself
// when l is empty, else the envelope byte, uvarint branch count, each
// branch as 8 bytes of ID and a uvarint count, then state.
func Wrap(l Lineage, state []byte) []byte {
	if len(l) == 0 {
		return state
	}
	out := binary.AppendUvarint([]byte{envelope}, uint64(len(l)))
	for _, b := range l {
		out = binary.BigEndian.AppendUint64(out, b.ID)
		out = binary.AppendUvarint(out, uint64(b.Consumed))
	}
	return append(out, state...)
}

// Unwrap splits what an owner stored into its lineage and core's state. A
// state without an envelope has no lineage; an envelope that does not
// parse is returned whole as the state, which core refuses as corrupt
// (ModeReconstruct replaces it).
func Unwrap(stored []byte) (Lineage, []byte) {
	if len(stored) == 0 || stored[0] != envelope {
		return nil, stored
	}
	p := stored[1:]
	n, k := binary.Uvarint(p)
	if k <= 0 || n == 0 || n > MaxBranches {
		return nil, stored
	}
	p = p[k:]
	l := make(Lineage, 0, n)
	for range n {
		if len(p) < 8 {
			return nil, stored
		}
		id := binary.BigEndian.Uint64(p)
		c, k := binary.Uvarint(p[8:])
		if k <= 0 || id == 0 || c > math.MaxInt64 {
			return nil, stored
		}
		l = append(l, Branch{ID: id, Consumed: int64(c)})
		p = p[8+k:]
	}
	return l, p
}

// count returns the consumption l holds of branch id (0 when it lacks it).
func (l Lineage) count(id uint64) int64 {
	for _, b := range l {
		if b.ID == id {
			return b.Consumed
		}
	}
	return 0
}

// with returns l with branch b set to b.Consumed (appended when l lacks
// it), the oldest branches dropped beyond MaxBranches. l is not changed.
func (l Lineage) with(b Branch) Lineage {
	out := make(Lineage, 0, len(l)+1)
	found := false
	for _, x := range l {
		if x.ID == b.ID {
			x.Consumed, found = max(x.Consumed, b.Consumed), true
		}
		out = append(out, x)
	}
	if !found {
		out = append(out, b)
	}
	if len(out) > MaxBranches {
		out = out[len(out)-MaxBranches:]
	}
	return out
}

// Spent returns the tokens a write consumed: the tokens before it (in
// before, or in a bucket created at now with after's configuration when
// before is empty) less those after it, both at now, at least 0. Refill
// is the same for both at one instant, so this is what the operations
// took; a write that added tokens consumed nothing.
func Spent(before, after []byte, now int64) int64 {
	ta, ok := available(after, now)
	if !ok {
		return 0
	}
	var tb int64
	if len(before) > 0 {
		if tb, ok = available(before, now); !ok {
			return 0
		}
	} else {
		b, err := wire.DecodeState(after)
		if err != nil {
			return 0
		}
		fresh := core.NewState(b.Config, now)
		tb = fresh.AvailableTokens(now)
	}
	return max(tb-ta, 0)
}

// Advance returns the lineage of a state this member writes for key
// during a split, from the lineage read of the state it read and spent,
// the tokens the write consumed, and the branch it advanced (give it to
// Put with the state). The write continues this member's branch of key
// when the state read holds that branch at the count this member last
// journaled (it descends from that write); otherwise (the first write of
// the split, or a state from elsewhere) it begins a new branch, since a
// count only means something along one chain of writes.
func (j *Journal) Advance(key string, read Lineage, spent int64) (Lineage, Branch) {
	j.mu.Lock()
	e, ok := j.entries[key]
	j.mu.Unlock()
	b := Branch{ID: rand.Uint64() | 1}
	if ok && e.branch.ID != 0 && read.count(e.branch.ID) == e.branch.Consumed {
		b = e.branch
	}
	b.Consumed += spent
	return read.with(b), b
}

// Merge is the rule an owner merges a journaled state into its own by:
// current is what it stores for the bucket now, incoming what a member
// journaled during a split (both as stored, lineage included), now the
// owner's clock. The result is current less every token incoming's
// lineage holds beyond current's (a branch current lacks, or the part of
// a count current has not seen), into debt if need be, with the branches
// of both at their higher count; changed is false when that is current
// itself. So each side's consumption since the split is subtracted once:
// a state that already holds a branch (its own side's, or an earlier
// merge of it, or a newer state along the same chain) subtracts nothing
// for it, and a state with no branch in common subtracts all of
// incoming's. A side that held no copy of the bucket created it full in
// the split, without what was consumed before it, so subtracting the
// other side's branches from its copy would mint that consumption back:
// Merge also takes incoming less every token current's lineage holds
// beyond incoming's, and keeps whichever of the two holds fewer tokens
// (the same bucket where both sides descend from one state; the exact one
// where either side was created fresh), when both have one configuration.
// An absent or unreadable current yields incoming; an unreadable incoming
// leaves current. It never mints: the result holds no more tokens than
// current.
func Merge(current, incoming []byte, now int64) (merged []byte, changed bool) {
	li, si := Unwrap(incoming)
	if _, ok := available(si, now); !ok {
		return current, false
	}
	lc, sc := Unwrap(current)
	b, err := wire.DecodeState(sc)
	if len(current) == 0 || err != nil {
		return incoming, true
	}
	var missing, beyond int64 // incoming's consumption current lacks, and current's incoming lacks
	l := lc
	for _, x := range li {
		if c := lc.count(x.ID); x.Consumed > c {
			missing += x.Consumed - c
			l = l.with(x)
		}
	}
	if missing == 0 {
		return current, false
	}
	for _, x := range lc {
		if c := li.count(x.ID); x.Consumed > c {
			beyond += x.Consumed - c
		}
	}
	debit(&b, missing, now)
	if bi, err := wire.DecodeState(si); err == nil && bi.ConfigVersion == b.ConfigVersion && bi.Config.Equal(&b.Config) {
		debit(&bi, beyond, now)
		if bi.AvailableTokens(now) < b.AvailableTokens(now) {
			b = bi
		}
	}
	return Wrap(l, wire.AppendState(nil, &b)), true
}

// debit takes n tokens from b at now, into debt if need be.
func debit(b *core.State, n, now int64) {
	if b.ConsumeIgnoringRateLimits(n, now) == math.MaxInt64 {
		// A debt beyond int64: take what there is.
		b.TryConsumeAsMuchAsPossible(max(b.AvailableTokens(now), 0), now)
	}
}

// TimeToFull returns how long the bucket stored (lineage included) takes
// to refill to capacity from now, in nanoseconds (0 when full or
// unreadable): a merged bucket must not expire before, or its debt
// would be forgotten.
func TimeToFull(stored []byte, now int64) int64 {
	_, s := Unwrap(stored)
	b, err := wire.DecodeState(s)
	if err != nil {
		return 0
	}
	return int64(b.Diagnose(now).TimeToFull)
}
