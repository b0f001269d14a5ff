package olric

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	olricdb "github.com/olric-data/olric"
)

// lostMarkSuffix names the DMap of the lost marks: Config.DMap with it
// appended (see lostMarks).
const lostMarkSuffix = ".lost"

// lostMarks keeps each partition's loss record (routes.lostAt) inside the
// partition itself, so that it reaches a member that never read the
// takeover: one lost mark per lost partition, an entry of the DMap
// Config.DMap+".lost" whose key hashes to that partition, holding the
// instant of the loss. Olric moves and replicates it with the partition's
// buckets, so whoever owns the partition later reads it there; see "Lost
// state" in the package documentation.
//
// A member writes a partition's mark after a routing read that recorded a
// new loss of it, whoever owns it (Olric routes the write to the owner),
// and after one in which it acquired a partition lost before, in case the
// mark was not written (write, in the background: the refresher does not
// wait for Olric). Every member that records the loss writes: one whose
// reads missed it (TestCrash's open case in "Lost state": a new owner
// that recorded no loss where another survivor did) hands no record on,
// and the others' marks then reach a later joiner. An owner that finds
// a bucket absent and creates it reads the mark (lostAt), unless no mark
// can exist yet (no other member heard of, none queued). Nothing else
// reads it: a bucket that exists pays nothing. A member heeds only a mark
// of a loss before its first routing read returned, which its own reads
// could not judge (the first has none before it to compare with); a later
// one they judged (routes.lostAt): so a mark written by a split's other
// side, which Olric merges in at the heal, changes nothing on a member
// that ran through the split.
type lostMarks struct {
	m *Member
	// since is when (Config.Clock) the member's first routing read
	// returned, 0 before.
	since atomic.Int64
	// queued is set once this member queued a mark to write (note), and
	// never cleared: before, and while no other member was heard of, no
	// mark exists (lostAt).
	queued atomic.Bool
	// keys[p] is the key of partition p's mark: a decimal number, the
	// first that hashes to p in the marks' DMap.
	keys []string

	mu      sync.Mutex
	dm      olricdb.DMap     // the marks' DMap; nil until first used
	pending map[uint64]int64 // partitions to mark, with their loss
	writing bool             // writer holds a snapshot of pending
	kickCh  chan struct{}
}

// init readies lm for member m: it finds each partition's mark key.
func (lm *lostMarks) init(m *Member) {
	lm.m, lm.kickCh, lm.pending = m, make(chan struct{}, 1), map[uint64]int64{}
	n := m.cfg.PartitionCount
	lm.keys = make([]string, n)
	name := m.cfg.DMap + lostMarkSuffix
	for i, found := uint64(0), uint64(0); found < n; i++ {
		k := strconv.FormatUint(i, 10)
		var d xxhash.Digest
		d.Reset()
		d.WriteString(name)
		d.WriteString(k)
		if p := d.Sum64() % n; lm.keys[p] == "" {
			lm.keys[p], found = k, found+1
		}
	}
}

// dmap returns the marks' DMap, creating the handle on first use.
func (lm *lostMarks) dmap() (olricdb.DMap, error) {
	lm.mu.Lock()
	defer lm.mu.Unlock()
	if lm.dm == nil {
		dm, err := lm.m.node.client.NewDMap(lm.m.cfg.DMap + lostMarkSuffix)
		if err != nil {
			return nil, fmt.Errorf("bucketgrid/olric: lost marks: %w", err)
		}
		lm.dm = dm
	}
	return lm.dm, nil
}

// note queues a mark for every partition with a loss in nr that prev (nil
// for none) did not record, or that this member owns in nr and did not
// own in prev. Under LostFull nothing is marked. The first read (prev nil)
// sets since.
func (lm *lostMarks) note(prev, nr *routes) {
	m := lm.m
	if prev == nil {
		lm.since.CompareAndSwap(0, m.cfg.Clock.Now())
	}
	if m.cfg.LostState != LostEmpty {
		return
	}
	queued := false
	for p, at := range nr.lostAt {
		if at == 0 || prev != nil && prev.lostAt[p] == at && (nr.owners[p] != m.name || prev.owners[p] == m.name) {
			continue
		}
		lm.queued.Store(true)
		lm.mu.Lock()
		lm.pending[uint64(p)] = max(lm.pending[uint64(p)], at)
		lm.mu.Unlock()
		queued = true
	}
	if queued {
		select {
		case lm.kickCh <- struct{}{}:
		default:
		}
	}
}

// writer writes the queued marks until the member shuts down; a mark that
// fails is tried again after RoutingRefresh.
func (lm *lostMarks) writer() {
	m := lm.m
	defer m.wg.Done()
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-lm.kickCh:
		case <-retry.C:
		}
		lm.mu.Lock()
		todo := lm.pending
		lm.pending, lm.writing = map[uint64]int64{}, true
		lm.mu.Unlock()
		failed := false
		for p, at := range todo {
			ctx, cancel := context.WithTimeout(m.ctx, m.cfg.RoutingLease)
			err := lm.write(ctx, p, at)
			cancel()
			if err != nil {
				failed = true
				lm.mu.Lock()
				lm.pending[p] = max(lm.pending[p], at)
				lm.mu.Unlock()
			}
		}
		lm.mu.Lock()
		lm.writing = false
		lm.mu.Unlock()
		if failed {
			retry.Reset(m.cfg.RoutingRefresh)
		}
	}
}

// idle reports whether no mark is queued or being written.
func (lm *lostMarks) idle() bool {
	lm.mu.Lock()
	defer lm.mu.Unlock()
	return len(lm.pending) == 0 && !lm.writing
}

// write stores partition p's mark as at, unless it already holds a later
// loss (a mark only moves forward).
func (lm *lostMarks) write(ctx context.Context, p uint64, at int64) error {
	dm, err := lm.dmap()
	if err != nil {
		return err
	}
	if old, err := lm.read(ctx, dm, p); err != nil {
		return err
	} else if old >= at {
		return nil
	}
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(at))
	if err := dm.Put(ctx, lm.keys[p], b[:]); err != nil {
		return fmt.Errorf("bucketgrid/olric: lost mark of partition %d: %w", p, err)
	}
	return nil
}

// read returns partition p's mark, 0 when there is none. A mark that is
// not 8 bytes (not written by a Member) counts as none, and the next loss
// overwrites it.
func (lm *lostMarks) read(ctx context.Context, dm olricdb.DMap, p uint64) (int64, error) {
	lm.m.exec.olricReads.Add(1)
	gr, err := dm.Get(ctx, lm.keys[p])
	if errors.Is(err, olricdb.ErrKeyNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("bucketgrid/olric: lost mark of partition %d: %w", p, err)
	}
	b, err := gr.Byte()
	if err != nil || len(b) != 8 {
		return 0, nil
	}
	return int64(binary.BigEndian.Uint64(b)), nil
}

// lostAt returns since when the partition of an owner's hold o has been
// lost, 0 for never: the later of this member's record and the
// partition's mark, when the mark is of a loss before this member's first
// routing read returned (see lostMarks); else the record. The mark is
// read only once another member was heard of or this member queued a
// mark: before, none exists. Like
// ownerExec.read it reads once more when another member holds data of
// the partition: a mark still moving may be missed by the first Get.
func (lm *lostMarks) lostAt(o *ownerHold) (int64, error) {
	at := o.r.lostAt[o.p]
	if !lm.m.node.others.Load() && !lm.queued.Load() {
		// Only this member can have written a mark, and it wrote none:
		// the mark is 0, which heedMark turns into at.
		return at, nil
	}
	dm, err := lm.dmap()
	if err != nil {
		return 0, err
	}
	mark, err := lm.read(o.ctx, dm, o.p)
	if err == nil && mark == 0 && lm.m.exec.othersHold(o.r, o.p) {
		mark, err = lm.read(o.ctx, dm, o.p)
	}
	if err != nil {
		return 0, err
	}
	return heedMark(at, mark, lm.since.Load()), nil
}

// heedMark returns since when a partition has been lost for a member
// whose record says at and whose first routing read returned at since (0
// before), the partition's mark saying mark (0 for none): the later of
// at and a mark of a loss before since, else at.
func heedMark(at, mark, since int64) int64 {
	if since == 0 || mark > since {
		return at
	}
	return max(at, mark)
}
