package olric

import "errors"

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
