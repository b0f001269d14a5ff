package olric

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
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
// instants of its losses (the newest maxMarkLosses). Olric moves and replicates it with the partition's
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
// reads it: a bucket that exists pays nothing. A member heeds only the
// latest loss of a mark before its first routing read returned, which its
// own reads could not judge (the first has none before it to compare
// with); a later one they judged (routes.lostAt): so a mark written by a
// split's other side, which Olric merges in at the heal, changes nothing
// on a member that ran through the split (see heedMark).
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
	dm      olricdb.DMap       // the marks' DMap; nil until first used
	pending map[uint64][]int64 // partitions to mark, with their losses
	writing bool               // writer holds a snapshot of pending
	kickCh  chan struct{}
}

// init readies lm for member m: it finds each partition's mark key.
func (lm *lostMarks) init(m *Member) {
	lm.m, lm.kickCh, lm.pending = m, make(chan struct{}, 1), map[uint64][]int64{}
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
		lm.queue(uint64(p), at)
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
		lm.pending, lm.writing = map[uint64][]int64{}, true
		lm.mu.Unlock()
		failed := false
		for p, ats := range todo {
			for _, at := range ats {
				ctx, cancel := context.WithTimeout(m.ctx, m.cfg.RoutingLease)
				err := lm.write(ctx, p, at)
				cancel()
				if err != nil {
					failed = true
					lm.queue(p, at)
				}
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

// queue adds the loss at of partition p to the marks to write: every
// loss, so that one recorded while the writer was busy is not hidden by
// a later one (see heedMark).
func (lm *lostMarks) queue(p uint64, at int64) {
	lm.queued.Store(true)
	lm.mu.Lock()
	defer lm.mu.Unlock()
	if !slices.Contains(lm.pending[p], at) {
		lm.pending[p] = append(lm.pending[p], at)
	}
}

// idle reports whether no mark is queued or being written.
func (lm *lostMarks) idle() bool {
	lm.mu.Lock()
	defer lm.mu.Unlock()
	return len(lm.pending) == 0 && !lm.writing
}

// maxMarkLosses is how many losses a lost mark keeps, the newest: a
// member that joined before all of them cannot tell whether an older one
// it should heed was dropped (see heedMark). Every member that records a
// loss writes its own instant of it, and members re-record a partition
// lost whenever gossip on a starved machine declares a living member dead
// (TestLostReachesJoiner beside busy loops saw five losses of one
// partition in 40 s), so it keeps room for several rounds: 128 bytes a
// partition.
const maxMarkLosses = 16

// write adds the loss at to partition p's mark (the instants of the
// losses members recorded, ascending, the newest maxMarkLosses), unless
// it holds at already. A mark records every loss rather than only the
// latest: a member heeds the latest loss before its first routing read,
// which a later one must not hide (see heedMark). Two members writing at
// once may each drop the other's loss (a Get, then a Put); every member
// that recorded a loss writes it, so such a loss is dropped only if all
// of them raced.
func (lm *lostMarks) write(ctx context.Context, p uint64, at int64) error {
	dm, err := lm.dmap()
	if err != nil {
		return err
	}
	old, err := lm.read(ctx, dm, p)
	if err != nil && !errors.Is(err, errCorruptMark) {
		return err
	}
	i, found := slices.BinarySearch(old, at)
	if found {
		return nil
	}
	losses := slices.Insert(old, i, at)
	losses = losses[max(0, len(losses)-maxMarkLosses):]
	b := make([]byte, 0, 8*len(losses))
	for _, l := range losses {
		b = binary.BigEndian.AppendUint64(b, uint64(l))
	}
	if err := dm.Put(ctx, lm.keys[p], b); err != nil {
		return fmt.Errorf("bucketgrid/olric: lost mark of partition %d: %w", p, err)
	}
	return nil
}

// errCorruptMark: a lost mark's bytes are not a mark a Member writes (1
// to maxMarkLosses positive instants of 8 bytes each, ascending).
var errCorruptMark = errors.New("not a lost mark")

// read returns the losses partition p's mark holds, ascending, none when
// there is no mark. A mark that is not one a Member writes fails with an
// error wrapping errCorruptMark (see lostAt; a loss recorded later
// overwrites it).
func (lm *lostMarks) read(ctx context.Context, dm olricdb.DMap, p uint64) ([]int64, error) {
	lm.m.exec.olricReads.Add(1)
	gr, err := dm.Get(ctx, lm.keys[p])
	if errors.Is(err, olricdb.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("bucketgrid/olric: lost mark of partition %d: %w", p, err)
	}
	b, err := gr.Byte()
	if err != nil {
		return nil, fmt.Errorf("bucketgrid/olric: lost mark of partition %d: %w: %w", p, errCorruptMark, err)
	}
	losses, ok := decodeMark(b)
	if !ok {
		return nil, fmt.Errorf("bucketgrid/olric: lost mark of partition %d: %w: %d bytes %x", p, errCorruptMark, len(b), b[:min(len(b), 16)])
	}
	return losses, nil
}

// decodeMark returns the losses a mark's bytes b hold, false when b is
// not a mark (see errCorruptMark).
func decodeMark(b []byte) ([]int64, bool) {
	if len(b) == 0 || len(b)%8 != 0 || len(b) > 8*maxMarkLosses {
		return nil, false
	}
	losses := make([]int64, len(b)/8)
	for i := range losses {
		losses[i] = int64(binary.BigEndian.Uint64(b[8*i:]))
		if losses[i] <= 0 || i > 0 && losses[i] <= losses[i-1] {
			return nil, false
		}
	}
	return losses, true
}

// lostAt returns since when the partition of an owner's hold o has been
// lost, 0 for never: the later of this member's record and the
// partition's mark, when the mark is of a loss before this member's first
// routing read returned (see lostMarks); else the record. The mark is
// read only once another member was heard of or this member queued a
// mark: before, none exists. Like
// ownerExec.read it reads once more when another member holds data of
// the partition: a mark still moving may be missed by the first Get. A
// corrupt mark (errCorruptMark) proves neither a loss nor its absence:
// the partition counts as lost now (now, Config.Clock), an
// under-admission, and the member logs it.
func (lm *lostMarks) lostAt(o *ownerHold, now int64) (int64, error) {
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
	if err == nil && len(mark) == 0 && lm.m.exec.othersHold(o.r, o.p) {
		mark, err = lm.read(o.ctx, dm, o.p)
	}
	if errors.Is(err, errCorruptMark) {
		lm.m.logf("%v; the partition counts as lost now, its absent buckets start empty", err)
		return max(at, now), nil
	}
	if err != nil {
		return 0, err
	}
	return heedMark(at, mark, lm.since.Load()), nil
}

// heedMark returns since when a partition has been lost for a member
// whose record says at and whose first routing read returned at since (0
// before), the partition's mark holding the losses mark (ascending): the
// later of at and the latest loss at or before since. Later losses the
// member's own reads judged (at). A full mark whose losses are all later
// may have dropped one the member should heed: it heeds the oldest kept,
// which is later than any dropped, an under-admission.
func heedMark(at int64, mark []int64, since int64) int64 {
	if since == 0 || len(mark) == 0 {
		return at
	}
	i, found := slices.BinarySearch(mark, since)
	switch {
	case found:
		return max(at, mark[i])
	case i > 0:
		return max(at, mark[i-1])
	case len(mark) >= maxMarkLosses:
		return max(at, mark[0])
	}
	return at
}
