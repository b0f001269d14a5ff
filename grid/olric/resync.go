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
// owns took a new generation of copies (routes.copies: a new owner or
// backups, or a gap or split that may hide one), the resyncer lists the
// partition's keys on every member holding its data (Olric's scan,
// primary and backup fragments), and reads and writes back each one it
// has not written in the partition's current epoch, under the key's lock
// and the hand-over guard like any execution: the write reaches the
// current backups. A key the read finds absent (expired, or a copy a move
// hid from both of read's Gets) is left. A partition is swept for its
// generation once every key was written in it; Member.Replicated reports
// whether every partition this member owns is.
type resyncer struct {
	m      *Member
	kickCh chan struct{}
	mu     sync.Mutex
	swept  []uint64 // swept[p]: the copies generation of p whose keys were all written, 0 for none
	// peers are connections to the members' Olric ports (through their
	// owner channels when secured, as Olric's own): the sweeps' and the
	// wide reads' (wideread.go).
	peers olricPeers
}

// resyncScanCount is how many keys one scan call asks a member for.
const resyncScanCount = 256

// errMoved: the key's partition is no longer this member's in the copies
// generation being swept.
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

// pending returns the partitions this member owns in r whose copies
// generation is not swept yet.
func (rs *resyncer) pending(r *routes) []uint64 {
	if r == nil || rs.m.cfg.ReplicaCount < 2 {
		return nil
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	var out []uint64
	for p, o := range r.owners {
		if o == rs.m.name && rs.swept[p] != r.copies[p] {
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
// error that left a partition pending. It lists every pending partition's
// keys at once (scanAll), then writes them back resyncTouchers at a time:
// its cost is a few round trips per holder, however many partitions
// changed, plus one read and one write per key. It does not ask Olric's
// statistics which fragments are empty: Olric v0.7.4 builds them
// iterating its members map while its routing table may write it (the
// race detector caught it in TestRollingRestartIdle), so every holder's
// fragments are scanned.
func (rs *resyncer) sweep(ctx context.Context) error {
	m := rs.m
	r := m.routing.current()
	var ps []uint64
	for _, p := range rs.pending(r) {
		if cur := m.routing.current(); cur != r && cur.copies[p] != r.copies[p] {
			rs.kick() // a newer read changed p: sweep it under that one
			continue
		}
		ps = append(ps, p)
	}
	if len(ps) == 0 {
		return nil
	}
	begin := time.Now()
	keys, failed := rs.scanAll(ctx, r, ps)
	type job struct {
		p   uint64
		key string
	}
	jobs := make(chan job)
	var mu sync.Mutex
	var wg sync.WaitGroup
	n := 0
	for range resyncTouchers {
		wg.Go(func() {
			for j := range jobs {
				err := rs.touch(ctx, j.key, r.copies[j.p])
				if err == nil {
					continue
				}
				mu.Lock()
				if failed[j.p] == nil {
					failed[j.p] = err
				}
				mu.Unlock()
			}
		})
	}
	for _, p := range ps {
		for _, k := range keys[p] {
			n++
			jobs <- job{p, k}
		}
	}
	close(jobs)
	wg.Wait()
	var first error
	done := 0
	for _, p := range ps {
		err := failed[p]
		switch {
		case err == nil:
			rs.mu.Lock()
			rs.swept[p] = r.copies[p]
			rs.mu.Unlock()
			done++
		case errors.Is(err, errMoved):
			// not this member's in this generation any more: the read that said so kicked a sweep
		case first == nil:
			first = fmt.Errorf("partition %d: %w", p, err)
		}
	}
	m.logf("re-replicated %d of %d partitions (%d buckets) in %v", done, len(ps), n, time.Since(begin).Round(time.Millisecond))
	return first
}

// resyncTouchers is how many keys a sweep writes back at once.
const resyncTouchers = 16

// scanAll lists the keys of partitions ps that their holders in r hold
// (primary and backup fragments), and returns what failed for each
// partition it could not list. It scans each partition's holders in the
// order Olric moves data between them, so that a key moving during the
// sweep is found at its source or at its destination: Olric's table lists
// a partition's previous owners, then its owner, then its older backups
// before the current ones, and its balancer moves data towards the end of
// each list; this member, the owner, last. It goes in rounds: round i
// scans every partition's i-th holder, all of a holder's partitions in one
// pipelined round trip (and one more per page left), all holders at once.
func (rs *resyncer) scanAll(ctx context.Context, r *routes, ps []uint64) (map[uint64][]string, map[uint64]error) {
	m := rs.m
	order := make(map[uint64][]string, len(ps))
	rounds := 0
	for _, p := range ps {
		var o []string
		for h := range strings.SplitSeq(r.holders[p], ",") {
			if h != "" && h != m.name {
				o = append(o, h)
			}
		}
		order[p] = append(o, m.name)
		rounds = max(rounds, len(order[p]))
	}
	seen := make(map[uint64]map[string]struct{}, len(ps))
	failed := map[uint64]error{}
	for i := range rounds {
		byHolder := map[string][]uint64{}
		for _, p := range ps {
			if o := order[p]; i < len(o) && failed[p] == nil {
				byHolder[o[i]] = append(byHolder[o[i]], p)
			}
		}
		type result struct {
			h     string
			found map[uint64][]string
			err   error
		}
		results := make(chan result, len(byHolder))
		for h, hps := range byHolder {
			go func() {
				c, err := rs.peers.client(h)
				if err != nil {
					results <- result{h, nil, err}
					return
				}
				found, err := rs.scanHolder(ctx, c, hps)
				results <- result{h, found, err}
			}()
		}
		for range byHolder {
			res := <-results
			for _, p := range byHolder[res.h] {
				if res.err != nil {
					failed[p] = fmt.Errorf("scan of %s: %w", res.h, res.err)
					continue
				}
				if seen[p] == nil {
					seen[p] = map[string]struct{}{}
				}
				for _, k := range res.found[p] {
					seen[p][k] = struct{}{}
				}
			}
		}
	}
	keys := make(map[uint64][]string, len(ps))
	for p, ks := range seen {
		if failed[p] == nil {
			for k := range ks {
				keys[p] = append(keys[p], k)
			}
		}
	}
	return keys, failed
}

// scanHolder lists, through c (a member's Olric port), the keys of the
// primary and backup fragments of partitions ps that the member holds:
// one pipelined round trip for all of them, then one per page left over.
func (rs *resyncer) scanHolder(ctx context.Context, c *redis.Client, ps []uint64) (map[uint64][]string, error) {
	type frag struct {
		p      uint64
		backup bool
		cursor uint64
	}
	var todo []frag
	for _, p := range ps {
		todo = append(todo, frag{p: p}, frag{p: p, backup: true})
	}
	found := map[uint64][]string{}
	for len(todo) > 0 {
		cctx, cancel := context.WithTimeout(ctx, rs.m.cfg.RequestTimeout)
		pipe := c.Pipeline()
		cmds := make([]*redis.ScanCmd, len(todo))
		for i, f := range todo {
			args := []any{"dm.scan", f.p, rs.m.cfg.DMap, f.cursor, "COUNT", resyncScanCount}
			if f.backup {
				args = append(args, "RC")
			}
			cmds[i] = redis.NewScanCmd(cctx, nil, args...)
			_ = pipe.Process(cctx, cmds[i]) // queues it; Exec sends them all
		}
		_, err := pipe.Exec(cctx)
		cancel()
		if err != nil {
			return nil, err
		}
		next := todo[:0]
		for i, f := range todo {
			page, cursor, err := cmds[i].Result()
			if err != nil {
				return nil, err
			}
			found[f.p] = append(found[f.p], page...)
			if cursor != 0 {
				f.cursor = cursor
				next = append(next, f)
			}
		}
		todo = next
	}
	return found, nil
}

// touch reads key as its owner and writes it back unless it was written
// in the partition's current epoch already (replicate); it waits out a
// hand-over guard. It fails with errMoved when the key's partition is no
// longer this member's in copies generation gen (routes.copies).
func (rs *resyncer) touch(ctx context.Context, key string, gen uint64) error {
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
		err := rs.touchHeld(&o, key, gen)
		m.exec.release(&o)
		return err
	}
}

// touchHeld is touch's work under the key's hold o.
func (rs *resyncer) touchHeld(o *ownerHold, key string, gen uint64) error {
	m := rs.m
	if o.r.copies[o.p] != gen {
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
