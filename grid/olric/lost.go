package olric

import (
	"errors"
	"slices"
	"strings"

	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/core/wire"
)

// LostState is how a member creates a bucket it finds absent in a
// partition it took over without a readable copy: from a previous owner
// that left the routing table (killed, paused past gossip's suspicion, cut
// off by a split) with no other member holding the partition's data (no
// backup: ReplicaCount 1, or every backup gone too). Such a bucket's
// latest state is lost, and its absence proves nothing: it may have been
// drawn dry a moment before. See "Lost state" in the package
// documentation.
type LostState int

const (
	// LostEmpty, the default, creates such a bucket as it would have been
	// had it been empty at the takeover and refilled since: a key first
	// seen on the new owner long after the takeover starts full anyway,
	// one whose state was lost refills from nothing. A fault then admits
	// at most the refill over its duration, never a second capacity.
	LostEmpty LostState = iota
	// LostFull creates such a bucket full, as if the key were new: every
	// takeover without a copy hands each of its keys one more capacity.
	LostFull
)

// ErrLostState: Config.LostState is none of the LostState constants.
var ErrLostState = errors.New("bucketgrid/olric: LostState must be LostEmpty or LostFull")

// valid reports whether s is one of the constants.
func (s LostState) valid() bool { return s == LostEmpty || s == LostFull }

// lostTakeover reports whether this member, acquiring partition p in read
// nr after read prev, can read none of p's latest state: every member
// that held p's data in prev (its owners, previous owners and backups)
// has left nr (owns no partition there and holds none of p's data), and
// this member was not one of them. Olric drops a member that left the
// cluster from every owner and backup list, and keeps a living previous
// owner in p's owner list until p's data has moved; one it dropped from
// p's list while alive held no data of p, so p's absent buckets are truly
// absent. present names nr's owners. A partition with no holder in prev
// (a cluster still forming) is not lost.
func (m *Member) lostTakeover(prev, nr *routes, p int, present map[string]struct{}) bool {
	if prev == nil || prev.holders[p] == "" {
		return false
	}
	now := strings.Split(nr.holders[p], ",")
	for _, h := range strings.Split(prev.holders[p], ",") {
		if _, ok := present[h]; ok || h == m.name || slices.Contains(now, h) {
			return false
		}
	}
	return true
}

// emptySince returns the stored bytes of a new bucket of req's
// configuration that was empty at lostAt (Unix nanoseconds of the owner's
// clock, at most now) and refilled since: core refills it to now as it
// would any bucket, with integer arithmetic.
func emptySince(req *wire.Request, lostAt, now int64) []byte {
	at := min(lostAt, now)
	b := core.NewState(req.Config.Clone(), at)
	b.Refill(at) // an aligned bandwidth starts at its last boundary
	for i := range b.Bands {
		b.Bands[i].Size = min(b.Bands[i].Size, 0)
		b.Bands[i].RoundingError = 0
	}
	b.ConfigVersion = req.ConfigVersion
	return wire.AppendState(nil, &b)
}

// createsLost reports whether req, finding its bucket absent, would create
// it, so that under LostEmpty it must start from emptySince.
func createsLost(req *wire.Request) bool {
	switch req.Mode {
	case wire.ModeCreateIfAbsent, wire.ModeCreateOrReplace, wire.ModeReconstruct:
		return req.Config != nil
	}
	return false
}
