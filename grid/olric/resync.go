package olric

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bucketgrid/bucketgrid/grid/olric/internal/frame"
)

// resyncer re-replicates, with ReplicaCount 2 or more, the buckets of every
// partition whose ownership or backups changed in this member's routing
// reads, as soon as it can rather than when each bucket is next used.
// Olric copies a bucket to a partition's new backup only when the bucket
// is written, and its balancer only moves what a member holds and should
// not (a previous owner's or an older backup's data) to the partition's
// owner or current backups: after a member leaves, a partition it was
// owner or backup of keeps one copy of each bucket (the surviving
// holder's) until the bucket is written. The
// owner writes back a bucket it read and did not change, once per epoch
// (replicate), but only when a request reads it: a bucket nobody checked
// since (a window used up, its clients gone quiet) kept its single copy,
// and the next member restarted took it (TestNetRollingRestartIdle: every
// one of 50 idle buckets started full after a rolling restart of 3
// members). So after every routing read in which a partition this member
// owns took a new epoch, the resyncer lists the partition's keys on every
// member holding its data (Olric's scan, primary and backup fragments),
// and reads and writes back each one it has not written in that epoch,
// under the key's lock and the hand-over guard like any execution: the
// write reaches the current backups. A key the read finds absent (expired,
// or a copy a move hid from both of read's Gets) is left. A partition is
// swept for its epoch once every key was written in it; Member.Replicated
// reports whether every partition this member owns is.
type resyncer struct {
	m      *Member
	kickCh chan struct{}
	mu     sync.Mutex
	swept  []uint64 // swept[p]: the epoch of p whose keys were all written, 0 for none
	// peers are connections to the members' Olric ports (through their
	// owner channels when secured, as Olric's own): the sweeps' and the
	// wide reads' (wideread.go).
	peers olricPeers
}

// resyncScanCount is how many keys one scan call asks a member for.
const resyncScanCount = 256

// errMoved: the key's partition is no longer this member's in the epoch
// being swept.
var errMoved = errors.New("partition moved")

// init readies rs for member m.
func (rs *resyncer) init(m *Member) {
	rs.m, rs.kickCh = m, make(chan struct{}, 1)
	rs.swept = make([]uint64, m.cfg.PartitionCount)
	rs.peers.m = m
}

// kick asks the sweeper to look at the newest routing read.
func (rs *resyncer) kick() {
	select {
	case rs.kickCh <- struct{}{}:
	default:
	}
}

// pending returns the partitions this member owns in r whose epoch is not
// swept yet.
func (rs *resyncer) pending(r *routes) []uint64 {
	if r == nil || rs.m.cfg.ReplicaCount < 2 {
		return nil
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	var out []uint64
	for p, o := range r.owners {
		if o == rs.m.name && rs.swept[p] != r.epoch[p] {
			out = append(out, uint64(p))
		}
	}
	return out
}

// Replicated reports whether, as of this member's newest routing read,
// every bucket of every partition it owns has been written to the
// partition's current backups since the partition's owner or backups last
// changed (always true with ReplicaCount 1, which keeps no backups). A
// graceful Shutdown waits until every member reports it (see Shutdown);
// a rolling restart that waits for it too stops no member that would
// have to wait (see "Contract" in the package documentation).
func (m *Member) Replicated() bool {
	return len(m.exec.resync.pending(m.routing.current())) == 0
}

// run is the sweeping goroutine: it sweeps after every kick, and again
// every RoutingRefresh while a sweep left work (a key held by a hand-over
// guard that outlived the sweep, a member that did not answer its scan).
func (rs *resyncer) run() {
	m := rs.m
	defer m.wg.Done()
	defer rs.peers.close()
	var retry <-chan time.Time
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-rs.kickCh:
		case <-retry:
		}
		retry = nil
		if err := rs.sweep(m.ctx); err != nil && m.ctx.Err() == nil {
			retry = time.After(m.cfg.RoutingRefresh)
		}
	}
}

// sweep writes back the buckets of every partition pending in the newest
// routing read (see resyncer) and marks each done; it returns the first
// error that left a partition pending. It does not ask Olric's statistics
// which fragments are empty: Olric v0.7.4 builds them iterating its
// members map while its routing table may write it (the race detector
// caught it in TestRollingRestartIdle), so every holder's fragments are
// scanned.
func (rs *resyncer) sweep(ctx context.Context) error {
	m := rs.m
	r := m.routing.current()
	var first error
	for _, p := range rs.pending(r) {
		if m.routing.current() != r && m.routing.current().epoch[p] != r.epoch[p] {
			rs.kick() // a newer read changed p: sweep it under that one
			continue
		}
		if err := rs.sweepPartition(ctx, r, p); err != nil {
			if errors.Is(err, errMoved) {
				continue // not this member's in this epoch any more: the read that said so kicked a sweep
			}
			if first == nil {
				first = fmt.Errorf("partition %d: %w", p, err)
			}
			continue
		}
		rs.mu.Lock()
		rs.swept[p] = r.epoch[p]
		rs.mu.Unlock()
	}
	return first
}

// sweepPartition writes back every key of partition p that its holders
// in r list, each under p's epoch in r. It scans them in the order Olric
// moves data between them, so that a key moving during the sweep is found
// at its source or at its destination: Olric's table lists p's previous
// owners, then its owner, then its older backups before the current ones,
// and its balancer moves data towards the end of each list; this member,
// p's owner, last.
func (rs *resyncer) sweepPartition(ctx context.Context, r *routes, p uint64) error {
	m := rs.m
	keys := map[string]struct{}{}
	var order []string
	for h := range strings.SplitSeq(r.holders[p], ",") {
		if h != "" && h != m.name {
			order = append(order, h)
		}
	}
	for _, h := range append(order, m.name) {
		for _, backup := range []bool{false, true} {
			if err := rs.scan(ctx, h, p, backup, keys); err != nil {
				return fmt.Errorf("scan of %s: %w", h, err)
			}
		}
	}
	for key := range keys {
		if err := rs.touch(ctx, key, r.epoch[p]); err != nil {
			return err
		}
	}
	return nil
}

// scan adds to keys the keys of partition p (its backup fragment when
// backup) that member h holds.
func (rs *resyncer) scan(ctx context.Context, h string, p uint64, backup bool, keys map[string]struct{}) error {
	c, err := rs.peers.client(h)
	if err != nil {
		return err
	}
	var cursor uint64
	for {
		args := []any{"dm.scan", p, rs.m.cfg.DMap, cursor, "COUNT", resyncScanCount}
		if backup {
			args = append(args, "RC")
		}
		cctx, cancel := context.WithTimeout(ctx, rs.m.cfg.RequestTimeout)
		cmd := redis.NewScanCmd(cctx, nil, args...)
		err := c.Process(cctx, cmd)
		cancel()
		if err != nil {
			return err
		}
		page, next, err := cmd.Result()
		if err != nil {
			return err
		}
		for _, k := range page {
			keys[k] = struct{}{}
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}

// touch reads key as its owner and writes it back unless it was written
// in epoch already (replicate); it waits out a hand-over guard. It fails
// with errMoved when the key's partition is no longer this member's in
// epoch.
func (rs *resyncer) touch(ctx context.Context, key string, epoch uint64) error {
	m := rs.m
	h := m.hash(key)
	for {
		o, refused, ok := m.exec.hold(ctx, h, bound{})
		if !ok {
			switch {
			case refused.kind == frame.KindNotOwner:
				return errMoved
			case refused.kind == frame.KindHold && !m.exec.leaving.Load():
				t := time.NewTimer(time.Duration(max(refused.hold, int64(time.Millisecond))))
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
					return ctx.Err()
				}
				continue
			case refused.kind == frame.KindHold:
				return ErrClosed
			case refused.err != nil:
				return refused.err
			default:
				return fmt.Errorf("refused (kind %d)", refused.kind)
			}
		}
		err := rs.touchHeld(&o, key, epoch)
		m.exec.release(&o)
		return err
	}
}

// touchHeld is touch's work under the key's hold o.
func (rs *resyncer) touchHeld(o *ownerHold, key string, epoch uint64) error {
	m := rs.m
	if o.epoch != epoch {
		return errMoved
	}
	s, failed, ok := m.exec.read(o, key)
	if !ok {
		return failed.err
	}
	if s.cached || s.state == nil {
		return nil
	}
	if f, failed := m.exec.replicate(o.ctx, o.st, key, s.stored, s.expiresAt, o.epoch); failed {
		return f.err
	}
	return nil
}
