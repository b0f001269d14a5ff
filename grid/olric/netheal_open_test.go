//go:build linux && netopen

// Built only with -tags netopen: TestNetHealKeepsKeys fails on the current
// code (the goal: "after a heal, keys that did not move answer at
// once: at most 100 ms of failures"), and stays out of the suite until
// that is fixed.
//
// The cause, traced 2026-12-07 (NETWATCH_TRACE=1, see netWatch): every
// member fails the keys it owned before, during and after the cut for
// 1.4-1.8 s once the network heals, with "owner holding the key during a
// hand-over": the end of a split in which another side declared this
// member dead (its gossip incarnation rose: it refuted the death) is a
// hand-over of every partition it owns, each guarded for HandoverGrace
// (refresh, routing.go; 138-276 partitions per member). That guard is
// what keeps this fault from minting capacity: the other side's Olric
// handed this member's partitions to its own members during the split,
// and their routing leases, which ran before they read the healed table,
// may let them execute for up to RoutingLease after it. Ending it sooner
// needs proof that those leases ended (for instance, each member of the
// other side saying, on the owner channel, when its last read that gave
// it the partition began), and agreement with the heal merge (heal.go,
// merge.go), which other work is changing; not done here.
// The first failure of one run was also "owner connection lost ... i/o
// timeout" towards the cut host: a routing read that still named it.
//
// The pause (TestNetResumeKeepsKeys) is no longer affected: nobody
// declares the running members dead, so their incarnation is unchanged
// and the split's end hands nothing over.

package olric

import (
	"testing"
	"time"
)

// TestNetHealKeepsKeys cuts member 1's host off the network for 3 s
// (gossip declares it dead), heals the network, and has members 0 and 2
// check the keys they own meanwhile, judged as in TestNetResumeKeepsKeys.
// The cut host's own checks are logged, not judged: while cut off, Olric
// on it may not re-route at all (see TestNetPartitionHeals).
func TestNetHealKeepsKeys(t *testing.T) {
	t.Parallel()
	keepsKeys(t, 9, func(*netCluster) int { return 1 }, func(c *netCluster, _ int) {
		t.Logf("cut at %d", time.Now().UnixMilli())
		c.bed.Partition(c.bed.Hosts[1:2])
		time.Sleep(3 * time.Second)
		t.Logf("healed at %d", time.Now().UnixMilli())
		c.bed.Heal()
	})
}
