package olric

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	olricdb "github.com/olric-data/olric"
	"github.com/redis/go-redis/v9"

	"github.com/bucketgrid/bucketgrid/grid/olric/internal/lost"
)

// routes is one read of Olric's routing table, as this member uses it.
// A routes value is immutable once published.
type routes struct {
	// owners[p] is the member name owning partition p; "" when unknown.
	owners []string
	// start is when the read started, in m.mono nanoseconds, and took how
	// long it took.
	start, took int64
	// guardUntil[p], for a partition this member owns, is the m.mono time
	// before which it holds the partition's requests (hand-over guard).
	guardUntil []int64
	// from[p], for a partition this member owns, is the member that owned
	// it in the read before this member acquired it ("" when unknown):
	// proof that it died ends the guard early (see skipGuards).
	from []string
	// backups[p] names partition p's backup owners, for a partition this
	// member owns.
	backups []string
	// replicas[p] names partition p's backup owners, for every partition:
	// with owners[p], who held what p's latest owner wrote (see
	// lost.LatestGone).
	replicas []string
	// history[p] is p's owner list in Olric's table: the previous owners
	// that still hold data of p, then its owner (see refresh, on gaps, and
	// markLost).
	history []string
	// holders[p] names, comma-separated, every member holding data of
	// partition p in Olric's table (owners, previous owners, backups), for
	// every partition: who a later owner of p could read p's state from
	// (see internal/lost).
	holders []string
	// lostAt[p] is when (Unix nanoseconds of Config.Clock) p's owner, this
	// member or another, took p over without a readable copy of p's state
	// (or a member that did handed it on), 0 when none did: a bucket of p
	// this member, owning p, finds absent was empty then
	// (Config.LostState; see markLost).
	lostAt []int64
	// movedAt[p] is when (m.mono) the latest read that changed p's
	// holders in Olric's table (history or replicas) returned, or one that
	// handed everything over (a member's first read in a cluster it joined,
	// a gap, a split's end); 0 for never. An owner that finds a bucket of
	// p absent within wideReadWindow of it asks every member (readWide).
	movedAt []int64
	// leftAt is when (m.mono) the latest read that lacked a member the
	// read before it named present returned; 0 for never.
	leftAt int64
	// watch[p] is what p's owner change left watched (see lost.Watched,
	// markLost).
	watch []lost.Watch
	// present names the members holding data in this read (see
	// lost.Takeover), as markLost judged them.
	present map[string]struct{}
	// epoch[p] changes whenever this member (re)acquires partition p or p's
	// backups change (so a read-only bucket is written again, see
	// replicate); a
	// cached bucket state is valid only under the epoch it was read in.
	epoch []uint64
	// copies[p] is the generation of p's copies: it changes with epoch[p]
	// whenever this member (re)acquires p, p's backups change or a gap or
	// split may have hidden such a change, but not when a gap between
	// reads only invalidates the cache (epoch changes alone): the backups
	// that hold what the owner wrote are still p's backups. The resyncer
	// writes p's buckets back once per generation (resync.go).
	copies []uint64
	// members is the number of distinct owners.
	members int
	// quorum: gossip saw a majority of the members this one knows when
	// the read was made (always true without Config.Quorum).
	quorum bool
	// split: gossip missed some of the members this one knows, so what
	// it executes may diverge from another side's; those buckets are
	// journaled and merged once everyone is back (see internal/journal).
	split bool
	// splitSince is when the split began (m.mono), and absent the members
	// missing from the routing table at some read since, while split.
	splitSince int64
	absent     []string
	// inc is this member's gossip incarnation when the read was made
	// (incKnown: membership.incarnation could read it), and splitInc what it
	// was when the latest split in this member's view began (hadSplit:
	// one began since the member started); see refresh.
	inc, splitInc      uint32
	incKnown, hadSplit bool
	// staleUntil is the end (m.mono) of the guard the latest stale
	// self-read set (see refresh), while it runs: the others' journals
	// merge in during it (mayExecute).
	staleUntil int64
	// lease ends at leaseEnd, RoutingLease after start: the owner's Olric
	// calls under this read are bounded by it.
	lease       context.Context
	leaseEnd    time.Time
	leaseCancel context.CancelFunc
}

// router is this member's view of Olric's routing table: the newest read,
// published for every execution to load, the refresher goroutine that
// re-reads it (every RoutingRefresh, on a cluster event, when kicked) and
// what the reads counted. Reads are the hand-over guard's clock: see
// refresh.
type router struct {
	m      *Member
	table  atomic.Pointer[routes] // the newest read; nil until start's first
	kickCh chan struct{}
	genMu  sync.Mutex
	genCh  chan struct{} // closed after each routing read
	epochs atomic.Uint64 // the last epoch given out (see routes.epoch)

	// lastEvent is when the member started or last heard of a cluster
	// event, in m.mono nanoseconds (see settle).
	lastEvent atomic.Int64
	shrinks   atomic.Int64 // routing reads with fewer members than the one before
	// handovers counts the partitions this member guarded after a routing
	// read (acquired, or possibly changed across a gap or a split).
	handovers atomic.Int64
	// readEnd is when (m.mono) the latest routing read attempt returned,
	// failed or not (see refresh, selfStale).
	readEnd atomic.Int64
	// marks keeps each lost partition's loss inside the partition, for a
	// member that never read it (lostmark.go).
	marks lostMarks
	// stale: whether this member's Olric routes by an older table than
	// the coordinator's (repush.go).
	stale stale
}

// init readies rt for member m, before m's first read.
func (rt *router) init(m *Member) {
	rt.m, rt.kickCh, rt.genCh = m, make(chan struct{}, 1), make(chan struct{})
}

// current returns the newest routing read.
func (rt *router) current() *routes { return rt.table.Load() }

// mono returns nanoseconds on the monotonic clock since the member started.
func (m *Member) mono() int64 { return int64(time.Since(m.base)) }

// refresh reads the routing table from Olric's coordinator and publishes it.
// Only the refresher goroutine calls it once Start has returned, so reads
// are published in order.
//
// The hand-over guard: a member that reads a table in which it owns
// partition p holds p for HandoverGrace after that read returned, unless its
// previous read (started at most HandoverGrace-RoutingLease earlier) showed
// it owning p already. The previous owner executes only while its own newest
// read, which showed it owning p and therefore started before the change,
// is younger than RoutingLease; so it stops before the change plus
// RoutingLease, and the new owner starts after the change plus
// HandoverGrace. Gaps between reads and splits: see the comments inside.
func (rtr *router) refresh(ctx context.Context) error {
	m := rtr.m
	start := m.mono()
	idle := start - rtr.readEnd.Load()
	// One table, not one torn by an update Olric is applying (see
	// stableRoutes); start stays the first read's, which showed the same.
	rt, err := stableRoutes(ctx, m.node.client.RoutingTable)
	defer func() { rtr.readEnd.Store(m.mono()) }()
	if err != nil {
		return err
	}
	returned := m.mono()
	n := m.cfg.PartitionCount
	nr := &routes{
		owners:     make([]string, n),
		start:      start,
		took:       returned - start,
		guardUntil: make([]int64, n),
		from:       make([]string, n),
		backups:    make([]string, n),
		history:    make([]string, n),
		holders:    make([]string, n),
		replicas:   make([]string, n),
		lostAt:     make([]int64, n),
		watch:      make([]lost.Watch, n),
		movedAt:    make([]int64, n),
		epoch:      make([]uint64, n),
		copies:     make([]uint64, n),
		leaseEnd:   m.base.Add(time.Duration(start) + m.cfg.RoutingLease),
	}
	// Not cancelled when superseded: executions that loaded this read may
	// still be running, and remain valid until the lease ends.
	nr.lease, nr.leaseCancel = context.WithDeadline(m.ctx, nr.leaseEnd)
	distinct := map[string]struct{}{}
	for p, r := range rt {
		if p < n && len(r.PrimaryOwners) > 0 {
			o := r.PrimaryOwners[len(r.PrimaryOwners)-1]
			nr.owners[p] = o
			distinct[o] = struct{}{}
			nr.holders[p] = strings.Join(append(slices.Clip(r.PrimaryOwners), r.ReplicaOwners...), ",")
			nr.replicas[p] = strings.Join(r.ReplicaOwners, ",")
			nr.history[p] = strings.Join(r.PrimaryOwners, ",")
			if o == m.name {
				nr.backups[p] = strings.Join(r.ReplicaOwners, ",")
			}
		}
	}
	nr.members = len(distinct)
	nr.quorum, nr.split = true, false
	if m.members.ml != nil {
		alive, known := m.members.count(m.name)
		nr.split = alive < known
		nr.quorum = !m.cfg.Quorum || 2*alive > known
	}
	prev := rtr.table.Load()
	if m.members.incarnation != nil {
		nr.inc, nr.incKnown = m.members.incarnation(), true
	}
	if prev != nil {
		nr.splitInc, nr.hadSplit = prev.splitInc, prev.hadSplit
	}
	if nr.split && (prev == nil || !prev.split) {
		nr.splitInc, nr.hadSplit = nr.inc, true
	}
	if nr.split {
		rtr.noteAbsent(nr, prev, returned)
	}
	_, onlySelf := distinct[m.name]
	onlySelf = onlySelf && len(distinct) == 1
	// A gap between reads longer than HandoverGrace-RoutingLease could
	// hide an ownership that came and went in between (see below).
	gap := int64(0)
	if prev != nil {
		gap = start - prev.start
	}
	gapped := gap > int64(m.cfg.HandoverGrace-m.cfg.RoutingLease)
	// A table this member read from itself, being Olric's coordinator,
	// after such a gap of its own (it did not even try to read, idle, or
	// its previous read, which succeeded, took that long: its process
	// stopped or starved; not a coordinator that did not answer, as the
	// others see while it is stopped, one of which may become coordinator)
	// shows nothing of what the others did meanwhile: a
	// coordinator paused (SIGSTOP) or starved past gossip's suspicion was
	// declared dead by the others, who elected another coordinator and
	// moved its partitions to owners that executed them, while its own
	// Olric heard of none of it and, woken, still serves its table from
	// before (the others then read it again: the oldest member is
	// coordinator once it refuted its death). Neither its ownership nor
	// its state is proven then: such a read is a hand-over of everything,
	// and it counts as the start of a split in this member's view, so
	// that the rise of its incarnation (the refuted death) that gossip
	// may bring a moment later is one too. The others' consumption
	// reaches it meanwhile through their journals, which they ship once
	// they read a whole cluster again (see "Network splits"). A gap
	// shorter than gossip's quickest death, a probe's timeout and then
	// the shortest suspicion (SuspicionMult probe intervals, memberlist's
	// floor for clusters of up to 10), hid no such thing: nobody could
	// declare this member dead meanwhile (TestNetStarvedMember's 700 ms
	// pauses under its 1,125 ms, where every partition was guarded and
	// checks failed with no membership change).
	own := max(int64(m.cfg.HandoverGrace-m.cfg.RoutingLease),
		int64(m.cfg.ProbeTimeout)+int64(m.cfg.SuspicionMult)*int64(m.cfg.ProbeInterval))
	selfStale := prev != nil && gapped && (idle > own || prev.took > own) &&
		!onlySelf && coordinates(ctx, m.node.client, m.name)
	if selfStale {
		nr.splitInc, nr.hadSplit = nr.inc, true
	}
	// Coming out of a split (or losing or regaining a quorum) is a
	// hand-over of everything: Olric on a small side may keep a table in
	// which this member owns what the other side owned meanwhile, so
	// neither the cached state nor the ownership of the previous read
	// holds any longer. Unless every member missing during the split was
	// proven dead meanwhile: a crash, and a dead process executed nothing
	// (a restarted one starts without partitions). Or unless nobody
	// declared this member dead: another side's Olric hands over only the
	// partitions of members its gossip declared dead, so a partition this
	// member owns before and after the split was nobody else's on any
	// side (it is guarded like any other if its owner changed). Gossip
	// takes a member it declared dead back only once that member refuted
	// the death with a higher incarnation, so a side that declared this
	// member dead and is reconciled raised this member's incarnation: an
	// incarnation unchanged since the split began proves the split was
	// the others' absence alone (a paused or starved member, which the
	// test bed's resume case is), and a change seen later, however late
	// the other side's view comes back, is the hand-over of everything
	// then. Going into a split changes nothing this member owns; it only
	// starts new epochs.
	transition := prev != nil && (prev.quorum != nr.quorum ||
		prev.split && !nr.split && (!nr.incKnown || nr.inc != prev.splitInc) &&
			!m.members.deaths.allProvenSince(prev.absent, prev.splitSince) ||
		!prev.split && prev.hadSplit && nr.incKnown && prev.incKnown && nr.inc != prev.inc ||
		selfStale)
	sideChange := prev != nil && prev.split != nr.split
	// A gap between reads longer than HandoverGrace-RoutingLease could
	// hide an ownership that came and went in between. Another member
	// could have executed partition p in the gap only by owning it longer
	// than that; one that wrote to p keeps data of it, so Olric keeps it
	// in p's owner list until that data moved back here and a later
	// routing update pruned it, and one that only read changed nothing.
	// So a gap guards the partitions whose owner list or backups changed
	// across it, and a gap longer than 2*HandoverGrace
	// (room for those further updates) guards everything. Starvation of
	// this process alone (a scheduler that did not run the refresher)
	// changes none of them, but for a table read from itself (selfStale
	// above).
	far := gap > int64(2*m.cfg.HandoverGrace)
	guard := returned + int64(m.cfg.HandoverGrace)
	if prev != nil && prev.staleUntil > returned {
		nr.staleUntil = prev.staleUntil
	}
	if selfStale || transition && nr.staleUntil != 0 {
		nr.staleUntil = guard
	}
	wallNow := m.cfg.Clock.Now()
	holding := m.members.staying(distinct)
	markLost(prev, nr, holding, wallNow, int64(2*m.cfg.HandoverGrace))
	rtr.logRoutingChange(prev, nr, wallNow, transition || selfStale)
	if prev != nil {
		nr.leftAt = prev.leftAt
		for name := range prev.present {
			if _, ok := nr.present[name]; !ok {
				nr.leftAt = returned
				break
			}
		}
	}
	for p := range nr.owners {
		switch {
		case prev == nil && onlySelf:
		case prev == nil || transition || far || selfStale ||
			nr.history[p] != prev.history[p] || nr.replicas[p] != prev.replicas[p]:
			nr.movedAt[p] = returned
		default:
			nr.movedAt[p] = prev.movedAt[p]
		}
	}
	for p := range nr.owners {
		if nr.owners[p] != m.name {
			continue
		}
		changed := prev != nil && (prev.owners[p] != m.name || transition || far ||
			gapped && (nr.history[p] != prev.history[p] || nr.backups[p] != prev.backups[p]))
		switch {
		case prev == nil && onlySelf:
			// A new cluster: nobody else can hold a lease.
			nr.epoch[p] = rtr.epochs.Add(1)
			nr.copies[p] = nr.epoch[p]
		case prev == nil || changed:
			nr.guardUntil[p] = guard
			nr.epoch[p] = rtr.epochs.Add(1)
			nr.copies[p] = nr.epoch[p]
			if prev != nil {
				rtr.handovers.Add(1)
				// Across a gap, the owner of the previous read handed p
				// over only if no other owner holds data of p: one that
				// only read in between changed nothing.
				if !transition && (!gapped || nr.history[p] == m.name) {
					nr.from[p] = prev.owners[p]
				}
			}
		default:
			nr.guardUntil[p] = prev.guardUntil[p]
			nr.epoch[p] = prev.epoch[p]
			nr.copies[p] = prev.copies[p]
			nr.from[p] = prev.from[p]
			if nr.backups[p] != prev.backups[p] || gapped || sideChange {
				// The cached state is re-read from Olric: what another
				// member wrote back or merged in is there.
				nr.epoch[p] = rtr.epochs.Add(1)
			}
			if nr.backups[p] != prev.backups[p] || sideChange {
				nr.copies[p] = nr.epoch[p]
			}
		}
	}
	m.members.skipGuards(nr, distinct, returned)
	if prev != nil && nr.members < prev.members {
		rtr.shrinks.Add(1)
	}
	rtr.table.Store(nr)
	rtr.marks.note(prev, nr)
	rtr.staleTable(nr, m.mono())
	m.exec.resync.kick()
	if !nr.split {
		m.shipJournal()
	}
	return nil
}

// coordinates reports whether member name is Olric's coordinator in its
// own view (client, its embedded client), whose routing reads then come
// from its own table; true when it cannot tell (fail closed: see refresh).
func coordinates(ctx context.Context, client *olricdb.EmbeddedClient, name string) bool {
	ms, err := client.Members(ctx)
	if err != nil {
		return true
	}
	for _, x := range ms {
		if x.Coordinator {
			return x.Name == name
		}
	}
	return true
}

// markLost sets nr.lostAt for every partition (see lost.Since and
// lost.Watched) from the previous read prev (nil for none), present (the
// members holding data in nr, see lost.Takeover), now (Config.Clock) and
// window, how long an owner change stays watched: 2*HandoverGrace, so
// that the next read, HandoverGrace-RoutingLease later unless starved,
// falls within it with room. Every partition, not only those self owns:
// one that another member took over lost and hands on to self carries
// its loss along.
func markLost(prev, nr *routes, present map[string]struct{}, now, window int64) {
	nr.present = present
	if prev == nil {
		return
	}
	for p := range nr.owners {
		was := lost.Part{Owners: prev.history[p], Replicas: prev.replicas[p]}
		is := lost.Part{Owners: nr.history[p], Replicas: nr.replicas[p]}
		nr.lostAt[p] = lost.Since(was, is, prev.lostAt[p], prev.present, present, now)
		var gone bool
		if nr.watch[p], gone = lost.Watched(was, is, prev.watch[p], present, now, window); gone {
			nr.lostAt[p] = now
		}
	}
}

// staying returns the members of distinct that did not announce a graceful
// leave (see forget): the holders a new owner may still read through. A
// leaver is dropped from Olric's owner lists as holding nothing while it
// still owns partitions, but its data was never handed over (ReplicaCount
// 1: TestGracefulLeave saw its buckets start full where the new owner
// counted it present).
func (ms *membership) staying(distinct map[string]struct{}) map[string]struct{} {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	out := make(map[string]struct{}, len(distinct))
	for name := range distinct {
		if at, ok := ms.left[name]; !ok || time.Since(at) >= leftHold {
			out[name] = struct{}{}
		}
	}
	return out
}

// noteAbsent records, in a read made during a split, when the split began
// and which members have been missing from the routing table since, and
// probes those not yet proven dead since it began (see deaths): a split
// all of whose missing members died is a crash, and its end hands
// nothing over.
func (rt *router) noteAbsent(nr, prev *routes, returned int64) {
	m := rt.m
	nr.splitSince = returned
	if prev != nil && prev.split {
		nr.splitSince, nr.absent = prev.splitSince, slices.Clip(prev.absent)
	}
	for _, name := range m.members.absent(m.name, nr.owners) {
		if !slices.Contains(nr.absent, name) {
			nr.absent = append(nr.absent, name)
		}
	}
	for _, name := range nr.absent {
		if !m.members.deaths.provenSince(name, nr.splitSince) {
			m.members.probeDeath(name)
		}
	}
}

// refresher re-reads the routing table every RoutingRefresh and whenever
// kicked.
func (rt *router) refresher() {
	m := rt.m
	defer m.wg.Done()
	t := time.NewTicker(m.cfg.RoutingRefresh)
	defer t.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-t.C:
		case <-rt.kickCh:
		}
		ctx, cancel := context.WithTimeout(m.ctx, m.cfg.RoutingLease)
		rt.refresh(ctx)
		cancel()
		rt.genMu.Lock()
		close(rt.genCh)
		rt.genCh = make(chan struct{})
		rt.genMu.Unlock()
	}
}

// kick asks the refresher for a read now.
func (rt *router) kick() {
	select {
	case rt.kickCh <- struct{}{}:
	default:
	}
}

// waitRefresh kicks the refresher and waits until a read ends (or ctx).
func (rt *router) waitRefresh(ctx context.Context) error {
	rt.genMu.Lock()
	ch := rt.genCh
	rt.genMu.Unlock()
	rt.kick()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-rt.m.ctx.Done():
		return ErrClosed
	}
}

// nextRead returns a channel closed when the refresher's next read ends,
// or one already closed when a read newer than r was published.
func (rt *router) nextRead(r *routes) <-chan struct{} {
	rt.genMu.Lock()
	ch := rt.genCh
	rt.genMu.Unlock()
	if rt.table.Load() != r {
		return closedChan
	}
	return ch
}

// closedChan is a closed channel.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// events kicks a refresh on every Olric cluster event.
func (rt *router) events(ch <-chan *redis.Message) {
	m := rt.m
	defer m.wg.Done()
	for {
		select {
		case <-m.ctx.Done():
			return
		case msg, ok := <-ch:
			if !ok {
				return
			}
			switch msg.Channel {
			case leaveChannel:
				m.members.forget(msg.Payload)
			case repushChannel:
				rt.repush(msg.Payload)
			}
			rt.lastEvent.Store(m.mono())
			rt.kick()
		}
	}
}

// routingSettle is how long a member leaving waits, once nothing routes
// to it any more, after the last cluster event it heard; see settle.
const routingSettle = 100 * time.Millisecond

// settlePoll is how often settle reads the routing table.
const settlePoll = 20 * time.Millisecond

// settle waits, once the member left gossip (membership.leave), until
// nothing routes to it any more, so that Olric's Shutdown finds no fragment
// move or routing-table push coming in; or until ctx ends. Olric v0.7.4,
// with cluster events on (the member subscribes to them), counts each
// fragment its member receives in the WaitGroup its DMap service's
// Shutdown waits on, and its routing table counts each push it serves in
// its own: a move or a push served once that Wait began is a data race
// (the race detector reports the Add) and, inside a narrow window, the
// panic "sync: WaitGroup is reused before previous Wait has returned",
// which ends the process. Olric's Shutdown stops its DMap service before
// it leaves gossip, and its RESP server last: a member that left leaving
// to it stayed in every routing table for the whole of Olric's Shutdown,
// and the others' balancers (every RoutingRefresh) kept moving fragments
// to it.
//
// It waits until a routing-table read (the coordinator's own copy of the
// table, which it applies with the same push as every other member's)
// lists the member nowhere, or gossip counts no other member alive, and
// then until routingSettle has passed both since that read and since the
// last cluster event the member heard (a fragment received or sent, a
// member joining or leaving): the coordinator pushes a table to every
// member at once, and a balancer run that began under the previous table
// sends the fragment it was moving and then stops. Not covered: a member
// the push failed to reach keeps the previous table, and its balancer
// keeps moving to this member, until it asks the coordinator to push again
// (after staleAsk of disagreement, repush.go; not while its view counts a
// split with a member not proven dead) and the coordinator, its Olric
// routing lock free, pushes its table to that member alone, or until
// Olric's next periodic push (every minute), either of which may come
// after this wait; an ask that reaches this member while it settles, as
// coordinator, is read here and not answered; and when the wait ends with
// ctx (the coordinator did not drop the member, or could not be read),
// Olric shuts down as before this wait. A member that never found Olric's
// memberlist (a failed start) waits only until routingSettle has passed
// since it started or last heard of a cluster event.
func (rt *router) settle(ctx context.Context) {
	m := rt.m
	var events <-chan *redis.Message
	if m.node.sub != nil {
		events = m.node.sub.Channel()
	}
	unrouted := int64(-1) // when (m.mono) a read first found nothing routed here
	if m.members.ml == nil {
		unrouted = 0 // the quiet since the member started
	}
	t := time.NewTicker(settlePoll)
	defer t.Stop()
	for {
		if unrouted < 0 && rt.unrouted(ctx) {
			unrouted = m.mono()
		}
		if unrouted >= 0 && m.mono() >= max(unrouted, rt.lastEvent.Load())+int64(routingSettle) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case _, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			rt.lastEvent.Store(m.mono())
		case <-t.C:
		}
	}
}

// unrouted reports whether nothing routes to the member any more: gossip
// counts no other member alive, or the routing table read now lists it
// as no partition's owner or backup.
func (rt *router) unrouted(ctx context.Context) bool {
	m := rt.m
	if m.members.ml.NumMembers() == 0 {
		return true // memberlist counts itself no more once it left
	}
	t, err := m.node.client.RoutingTable(ctx)
	if err != nil {
		return false
	}
	for _, r := range t {
		if slices.Contains(r.PrimaryOwners, m.name) || slices.Contains(r.ReplicaOwners, m.name) {
			return false
		}
	}
	return true
}
