// Package olric embeds an Olric member (github.com/olric-data/olric) in each
// process of an application cluster and runs bucketgrid requests on the
// member that owns the bucket, in one hop: the entry processor Olric does
// not have.
//
// Start a Member in every process and hand it to bucketgrid.NewManager. A
// request for a key goes to the key's owner, found in Olric's partition table
// (partition = xxhash64(DMap+key) % PartitionCount, owner = the last primary
// owner of that partition), over the member's own owner channel: one TCP
// connection from each member to each other one, many requests in flight on
// each, requests and answers written in batches. When the calling member owns the key the
// request runs in place, without any network. The owner runs core.Process
// under a per-key lock with its own wall clock, against the bucket stored in
// Olric (it keeps a copy of what it last wrote, since it is the only writer,
// and reads Olric only on a miss), writes the new state to Olric only when it
// changed, with the TTL the request's expiration policy computed, and
// answers. A member that receives a request for a key it does not own answers
// "not owner"; the caller re-reads the routing table and tries again. Olric
// stores, replicates, expires and moves the buckets.
//
// # Contract
//
// With stable membership every request on a key runs on one member, under
// one lock, with one clock, so each bucket is exact and linearizable: no
// token is minted or lost, and clients never disagree about the time.
//
// When members join or leave, ownership moves, and two members must never
// execute the same key at once. Every member re-reads Olric's routing table
// every RoutingRefresh, on every Olric cluster event and on every not-owner
// answer; it executes a key only while its newest read that says it owns the
// key started less than RoutingLease ago. A member that becomes owner of a
// partition holds the partition's requests (callers wait and retry) for
// HandoverGrace after the read that told it so. Since HandoverGrace >
// RoutingLease, the old owner has stopped before the new one starts; the
// difference is the margin for a slow execution in flight. The new owner
// then reads the bucket from Olric, which merges the previous owner's copy.
// The price is availability: for HandoverGrace after a change, requests for
// the moved partitions wait, and an owner that cannot read the routing table
// for RoutingLease stops executing until it can.
//
// What a membership change may cost, as measured by the tests of this
// package (3 members, 300 buckets drawn down, load running):
//
//   - A member joins: nothing. Buckets keep their state on their new owner;
//     measured over-admission 0 (TestJoinUnderLoad).
//   - A member leaves gracefully (Shutdown) with ReplicaCount 2: nothing; the
//     backups take over. Measured: 0 buckets lost, over-admission 0 in every
//     run but one slowed down by the race detector, where one bucket of 100
//     admitted 19 tokens too many while Olric had not yet promoted its backup
//     (TestGracefulLeave).
//   - A member leaves gracefully with ReplicaCount 1: Olric does not hand its
//     data over, so each bucket it owned starts again full on its new owner:
//     measured, exactly the leaver's buckets (about a third) and no other.
//   - A member crashes (SIGKILL of its process): with ReplicaCount 1 exactly
//     its buckets start over full, with 2 none is lost; requests for its
//     partitions wait until memberlist declares it dead and the partitions
//     are handed over (about 5 s with the "local" profile) (TestCrash).
//
// So the bound during a membership change is: at most one bucket capacity
// of over-admission per bucket whose owner left or crashed; with
// ReplicaCount 1 that is what happens to each of them, with 2 it is rare and
// brief. A join costs nothing. What is not
// covered: a partition of the network that splits the cluster into two
// Olric clusters (Olric is AP; each side then owns every key), and clocks
// of different members far enough apart that a bucket moving between them
// sees time jump (core never mints tokens for time running backwards, but a
// clock ahead refills early).
//
// # Performance
//
// BenchmarkCheck runs 16 callers spread over 3 members in one process on a
// 2-core machine, side by side with Olric's Lock+Get+Put+Unlock; the module
// bench/gubernator runs gubernator on the same workload. See README.md for
// the figures.
//
// Failures: a request whose owner connection breaks before the answer
// arrives is sent again (to the same owner or, after re-routing, the new
// one), so it may be applied twice: a consumption may be counted twice,
// never forgotten. Errors from Olric on the owner are retried the same way
// until the request's context (or Config.RequestTimeout) ends.
//
// The DMap holding the buckets belongs to this package: writing to it by
// other means breaks the owner's copy. The application may use the embedded
// Olric for anything else (see Member.Olric).
//
// # Module path
//
// Olric's module path is github.com/olric-data/olric. Where a module proxy
// refuses that path, add to go.mod
//
//	replace github.com/olric-data/olric v0.7.4 => github.com/buraksezer/olric v0.7.4
package olric
