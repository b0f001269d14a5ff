// Package lost owns the rules of grid/olric's lost state: when a member
// that takes a partition over can read none of its latest state (Takeover,
// Orphaned for one it already held, and Watched for one it took over
// while its holders were still present), since when a partition's state
// is lost across routing reads, whoever owns it (Since),
// which requests create a bucket such a partition lost (Creates), and the
// state such a bucket starts from under LostEmpty (EmptySince). When a
// member applies them, and the LostState setting itself, belong to
// grid/olric (see "Lost state" in its package documentation).
package lost

import (
	"slices"
	"strings"

	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/core/wire"
)

// Takeover reports whether member self, acquiring a partition whose data
// holders (its owners, previous owners and backups, comma-separated) were
// prev in the last routing read and are now in the new one, can read none
// of the partition's latest state: every member that held its data in prev
// has left the new read (present, which names its owners, lacks it), and
// self was not one of them. A member that owns no partition in the new
// read is gone, though Olric may still list it as a previous owner whose
// data has yet to move: Olric keeps a dead member there too, and gossip
// here may not have declared it dead yet (TestCrash, ReplicaCount 1: every
// bucket of the crashed member started full on its new owner while the
// dead member stayed listed). A living member owns partitions (271 of them
// among the members), so one that owns none has left. A partition with no
// holder in prev (a cluster still forming) is not lost.
func Takeover(self, prev string, present map[string]struct{}) bool {
	if prev == "" {
		return false
	}
	for _, h := range strings.Split(prev, ",") {
		if _, ok := present[h]; ok || h == self {
			return false
		}
	}
	return true
}

// LatestGone reports whether member self, acquiring a partition whose
// owner was owner with backups replicas (comma-separated) in the last
// routing read, can read none of what that owner wrote: the owner and
// every backup have left, as Takeover judges it, though an older previous
// owner may still be listed. Such an owner holds only what the partition
// held before it took over; every bucket the lost owner wrote since is
// gone with it, so its absent buckets are lost all the same (a member
// killed soon after it acquired the partition from a living one).
func LatestGone(self, owner, replicas string, present map[string]struct{}) bool {
	if owner == "" || owner == self {
		return false
	}
	latest := owner
	if replicas != "" {
		latest += "," + replicas
	}
	return Takeover(self, latest, present)
}

// Orphaned reports whether member self, which owned a partition in the
// last routing read while previous owners still held data of it
// (prevOwners, its owner list then, ending with self, and prevHolders, all
// its data holders then), can read none of their data now: every holder
// other than self has left, as Takeover judges it. A member that acquired
// a partition while Olric still listed a leaver as its previous owner
// (the data had not moved) holds the partition when the leaver goes, so
// Takeover never asks; the leaver's buckets it never read are lost all
// the same. A partition with no previous owner but self is not orphaned:
// its backups hold only copies of self's own writes.
func Orphaned(self, prevOwners, prevHolders string, present map[string]struct{}) bool {
	if !slices.ContainsFunc(strings.Split(prevOwners, ","), func(o string) bool { return o != "" && o != self }) {
		return false
	}
	var others []string
	for _, h := range strings.Split(prevHolders, ",") {
		if h != self {
			others = append(others, h)
		}
	}
	return Takeover(self, strings.Join(others, ","), present)
}

// Part is what one routing read says of one partition: Owners, its owner
// list in Olric's table (the previous owners that still hold data of it,
// then its owner), and Replicas, its backups, each comma-separated.
type Part struct{ Owners, Replicas string }

// owner returns p's owner, "" when unknown.
func (p Part) owner() string { return p.Owners[strings.LastIndexByte(p.Owners, ',')+1:] }

// holders returns every member holding data of p, comma-separated.
func (p Part) holders() string {
	if p.Replicas == "" {
		return p.Owners
	}
	return p.Owners + "," + p.Replicas
}

// Since returns the instant since which partition next (read now) has
// been lost, 0 if it has a readable copy of its latest state, whoever
// owns it: from the read before, prev, lost since at (0 for never), and
// the members holding data in either read (prevPresent, present: see
// Takeover; prevPresent nil when unknown). A new owner that takes it over
// from holders that all left (Takeover, LatestGone), or an owner whose
// previous owners it read through all left (Orphaned), loses it now;
// otherwise the partition keeps at, including when a living member hands
// it on: what that member wrote moves with it (or is read through it),
// and a bucket it never wrote is as lost for the next owner as it was for
// it (the killed owner's partitions handed to one survivor and then on to
// another by a second rebalance). A partition whose owner is unknown
// keeps at too. Since errs towards under-admitting: a bucket absent in a
// partition lost long ago starts full anyway, one absent since a recent
// loss that the handing member deleted starts refilling from the loss.
func Since(prev, next Part, at int64, prevPresent, present map[string]struct{}, now int64) int64 {
	owner := next.owner()
	switch {
	case owner == "":
	case prev.owner() != owner:
		if Takeover(owner, prev.holders(), present) || LatestGone(owner, prev.owner(), prev.Replicas, present) {
			return now
		}
	case strings.Contains(prev.Owners, ",") && Orphaned(owner, prev.Owners, prev.holders(), present) &&
		(at == 0 || prevPresent != nil && !Orphaned(owner, prev.Owners, prev.holders(), prevPresent)):
		// Orphaned while Olric keeps listing a dead previous owner would
		// hold every read; only the read that saw the last holder leave
		// loses the partition again.
		return now
	}
	return at
}

// Watch is what one routing read leaves watched of a partition whose
// owner changed while members that held its data were still present but
// listed nowhere in the read (neither owner, previous owner nor backup),
// so the new owner cannot read through them: Holders, those members
// (comma-separated, "" for none), since At (the read's instant).
type Watch struct {
	Holders string
	At      int64
}

// Watched returns what to watch of partition next (read now, prev the
// read before, w the watch then) and whether the partition is lost now:
// every watched holder left (present, as Takeover judges it) within
// window of the owner change that started the watch. Olric's coordinator
// applies a new table one partition at a time while it answers routing
// reads, so a read can show some of a killed member's partitions moved
// while it still owns others (present, Takeover false), and the read
// after, without it, shows nothing changing hands (see "Lost state" in
// grid/olric's package documentation). A living holder that hands a
// partition on unlisted (Olric lists a previous owner until its data
// moved, so only one that held none) and leaves within window loses it
// too: its absent buckets start empty, an under-admission. A watch passes
// along when the owner changes again with nothing unlisted: what the
// watched holders wrote never reached the owner it was handed to either.
func Watched(prev, next Part, w Watch, present map[string]struct{}, now, window int64) (Watch, bool) {
	owner := next.owner()
	if owner == "" {
		return w, false
	}
	if prev.owner() != "" && prev.owner() != owner {
		if u := unlisted(owner, prev, next); u != "" {
			w = Watch{Holders: u, At: now}
		}
	}
	if w.Holders == "" || now < w.At || now-w.At > window {
		return Watch{}, false
	}
	if Takeover(owner, w.Holders, present) {
		return Watch{}, true
	}
	return w, false
}

// unlisted returns prev's data holders when self, next's owner, was none
// of them and next lists none of them, "" otherwise.
func unlisted(self string, prev, next Part) string {
	listed := strings.Split(next.holders(), ",")
	for _, h := range strings.Split(prev.holders(), ",") {
		if h == self || slices.Contains(listed, h) {
			return ""
		}
	}
	return prev.holders()
}

// EmptySince returns the stored bytes of a new bucket of req's
// configuration that was empty at lostAt (Unix nanoseconds of the owner's
// clock, at most now) and refilled since: core refills it to now as it
// would any bucket, with integer arithmetic.
func EmptySince(req *wire.Request, lostAt, now int64) []byte {
	b := core.NewStateHolding(req.Config.Clone(), min(lostAt, now), 0)
	for i := range b.Bands {
		b.Bands[i].RoundingError = 0 // a lost bucket keeps no refill progress either
	}
	b.ConfigVersion = req.ConfigVersion
	return wire.AppendState(nil, &b)
}

// Creates reports whether req, finding its bucket absent, would create
// it, so that under LostEmpty it must start from EmptySince.
func Creates(req *wire.Request) bool {
	switch req.Mode {
	case wire.ModeCreateIfAbsent, wire.ModeCreateOrReplace, wire.ModeReconstruct:
		return req.Config != nil
	}
	return false
}
