package olric

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	olricdb "github.com/olric-data/olric"
)

// errRoutingTorn: consecutive routing reads kept disagreeing, so none of
// them is known to be one table (see stableRoutes).
var errRoutingTorn = errors.New("bucketgrid/olric: routing table still changing between reads")

// stableReads bounds the reads of one stableRoutes call: a table that one
// update is being applied to settles within microseconds, and one that
// is still changing after this many reads is a hand-over under way, which
// the next refresh reads again.
const stableReads = 4

// stableRoutes returns a routing table that two consecutive calls of read
// (Olric's embedded client's RoutingTable) returned alike, reading at most
// stableReads times; errRoutingTorn when no two did, or read's error.
//
// Olric (v0.7.4) applies a routing update partition by partition, in map
// order, in updateRoutingCommandHandler, and answers a routing read from
// the coordinator's partitions without waiting for that update to end
// (fillRoutingTable), so one read can be torn: some of a killed member's
// partitions moved, the rest still its. Olric exposes no version of the
// table (its signature is internal), so two reads that agree are the
// proof at hand: a torn pair needs the coordinator's apply loop to stall
// across the whole of both reads, where one read needs it only to overlap
// (for the cost: one read more per refresh while the table stands still).
func stableRoutes(ctx context.Context, read func(context.Context) (olricdb.RoutingTable, error)) (olricdb.RoutingTable, error) {
	last, err := read(ctx)
	if err != nil {
		return nil, err
	}
	for range stableReads - 1 {
		rt, err := read(ctx)
		if err != nil {
			return nil, err
		}
		if sameRoutes(last, rt) {
			return rt, nil
		}
		last = rt
	}
	return nil, fmt.Errorf("%w after %d reads", errRoutingTorn, stableReads)
}

// sameRoutes reports whether a and b give every partition the same owner
// list and backups, in the same order.
func sameRoutes(a, b olricdb.RoutingTable) bool {
	return maps.EqualFunc(a, b, func(x, y olricdb.Route) bool {
		return slices.Equal(x.PrimaryOwners, y.PrimaryOwners) && slices.Equal(x.ReplicaOwners, y.ReplicaOwners)
	})
}
