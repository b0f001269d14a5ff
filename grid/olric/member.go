package olric

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
	olricdb "github.com/olric-data/olric"
	"github.com/redis/go-redis/v9"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/core/wire"
	"github.com/bucketgrid/bucketgrid/grid/olric/internal/fence"
	"github.com/bucketgrid/bucketgrid/grid/olric/internal/frame"
	"github.com/bucketgrid/bucketgrid/grid/olric/internal/journal"
	"github.com/bucketgrid/bucketgrid/grid/olric/internal/lost"
)

// ErrClosed is returned by a Member that is shutting down or shut down.
var ErrClosed = errors.New("bucketgrid/olric: member closed")

// Member is an embedded Olric member plus the owner side of bucketgrid: it
// stores buckets in an Olric DMap and executes the requests for the buckets
// it owns. It implements bucketgrid.Executor; hand it to
// bucketgrid.NewManager. A Member is safe for concurrent use.
type Member struct {
	cfg  Config
	name string // BindAddr:BindPort, Olric's member name
	base time.Time

	node node // the embedded Olric member, its client and DMap (node.go)

	ctx    context.Context // cancelled by Shutdown
	cancel context.CancelFunc
	wg     sync.WaitGroup

	routing router    // Olric's routing table as this member reads it, and the refresher (routing.go)
	exec    ownerExec // the owner side's stripes, drain gate and detached executions (owner.go)

	channel channel // the owner channel's listener and connections (channel.go)
	trust   guard   // credentials, proofs, revocation, the throttle (trust.go)

	peers peerPool // connections to the other members' owner channels (peers.go)

	members membership      // gossip's view beyond routing: healing, quorum, deaths (heal.go, failover.go)
	journal journal.Journal // buckets written while the cluster was split
	leases  *leaseTable     // nil with Config.Leases off

	shutdownOnce sync.Once
	shutdownErr  error
}

var _ bucketgrid.Executor = (*Member)(nil)

// Start starts an Olric member with cfg, joins cfg.Peers (or starts a new
// cluster), opens the owner channel and reads the first routing table. It
// returns when the member can serve requests or ctx (bounded by
// cfg.JoinTimeout) ends; on failure it releases everything it started.
//
// It fails with ErrInsecure when the member would be reachable from the
// network without security, and with an error matching ErrJoin when Peers
// is not empty and no peer let it in (ErrNotGossipPort too when the peers
// answer Olric's protocol: Peers takes gossip addresses).
func Start(ctx context.Context, cfg Config) (*Member, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	creds, err := cfg.credentials()
	if err != nil {
		return nil, err
	}
	ctx, cancelStart := context.WithTimeout(ctx, cfg.JoinTimeout)
	defer cancelStart()

	m := &Member{
		cfg:  cfg,
		name: net.JoinHostPort(cfg.BindAddr, strconv.Itoa(cfg.BindPort)),
		base: time.Now(),
		members: membership{
			seen: map[string]string{}, joining: map[string]bool{}, left: map[string]time.Time{},
			deaths: deaths{proven: map[string]int64{}, probing: map[string]bool{}},
		},
	}
	m.peers.m, m.members.m = m, m
	m.node.m, m.node.startErr = m, make(chan error, 1)
	m.routing.init(m)
	m.exec.resync.init(m)
	m.exec.m, m.exec.stripes = m, make([]stripe, cfg.Stripes)
	m.routing.marks.init(m)
	if cfg.Leases.on() {
		m.leases = newLeaseTable(cfg.Leases)
		m.leases.fence = fence.New(int64(cfg.Leases.Lifetime), cfg.Leases.MaxKeys, cfg.PartitionCount, cfg.Stripes)
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	chanAddr, err := channelAddr(m.name)
	if err != nil {
		m.cancel()
		return nil, err
	}
	peers, err := cfg.joinPeers(ctx)
	if err != nil {
		m.cancel()
		return nil, err
	}
	m.trust.init(m, creds)
	oc, err := m.node.config(peers)
	if err != nil {
		m.cancel()
		return nil, err
	}

	// go-redis, which Olric uses for its connections, logs through a
	// package-level logger; point it at LogOutput too.
	redis.SetLogger(redisLogger{log.New(cfg.LogOutput, "redis: ", log.LstdFlags)})

	if err = m.channel.listen(m, chanAddr); err != nil {
		m.trust.closeNet()
		m.cancel()
		return nil, fmt.Errorf("bucketgrid/olric: owner channel: %w", err)
	}
	m.node.olricClient = oc.Client
	if m.node.db, err = olricdb.New(oc); err != nil {
		m.trust.closeNet()
		m.channel.close()
		m.cancel()
		return nil, fmt.Errorf("bucketgrid/olric: %w", err)
	}
	// The owner channel answers before gossip starts: members verify a
	// joiner on it (trust.go) while it joins.
	m.wg.Add(1)
	go m.channel.serve()
	if m.trust.creds.store != nil {
		m.wg.Add(1)
		go m.trust.watchCerts()
	}
	for attempt := 1; ; attempt++ {
		go func() { m.node.startErr <- m.node.db.Start() }()
		err := m.node.start(ctx, peers)
		if err == nil {
			break
		}
		if attempt < maxBootstraps && (errors.Is(err, errBootstrapRace) || errors.Is(err, errStartClientClosed)) && ctx.Err() == nil {
			if err = m.node.restart(ctx, peers); err == nil {
				continue
			}
		}
		sctx, cancel := context.WithTimeout(context.Background(), cfg.LeaveTimeout+time.Second)
		defer cancel()
		m.Shutdown(sctx)
		return nil, err
	}
	m.node.started.Store(true)
	m.wg.Add(1)
	go m.routing.marks.writer()
	return m, nil
}

// Name returns the member's name in the cluster, BindAddr:BindPort.
func (m *Member) Name() string { return m.name }

// ChannelAddr returns the address of the member's owner channel,
// BindAddr:BindPort+1, where the other members reach it.
func (m *Member) ChannelAddr() string { return m.channel.addr }

// Olric returns the embedded Olric member, for the application's own use of
// the grid. Do not shut it down directly; call Shutdown.
func (m *Member) Olric() *olricdb.Olric { return m.node.db }

// Client returns an embedded client of the Olric member.
func (m *Member) Client() *olricdb.EmbeddedClient { return m.node.client }

// hash is Olric's key hash: partition = hash % PartitionCount. Olric
// hashes the DMap's name followed by the key with its default hasher,
// xxhash64 (the Member configures that hasher); a digest computes the same
// without building the concatenation.
func (m *Member) hash(key string) uint64 {
	var d xxhash.Digest
	d.Reset()
	d.WriteString(m.cfg.DMap)
	d.WriteString(key)
	return d.Sum64()
}

// Partition returns the Olric partition of key's bucket.
func (m *Member) Partition(key string) uint64 { return m.hash(key) % m.cfg.PartitionCount }

// Owner returns the name of the member that owns key's bucket in this
// member's newest routing read, or "" when unknown.
func (m *Member) Owner(key string) string {
	return m.routing.current().owners[m.Partition(key)]
}

// Route is the optional method of a bucketgrid.Executor that a Manager's
// degraded mode asks for a key's route: key's owner, as Owner, so that a
// Manager's degraded mode (bucketgrid.WithDegrade) keeps a circuit breaker
// per member and a crashed member degrades only the keys it owned.
func (m *Member) Route(key string) string { return m.Owner(key) }

// LiveInstances is the optional method of a bucketgrid.Executor that a
// Manager's degraded mode divides the limit by: the members owning
// partitions in this member's newest routing read, at least 1, which a
// Manager's degraded mode divides the limit by. A crashed member counts
// until the cluster has declared it dead and handed its partitions over (see
// "Crash fail-over window" in the package documentation): meanwhile each
// member's share is a little smaller than it could be, never larger.
func (m *Member) LiveInstances() int { return max(m.routing.current().members, 1) }

// outcome is the result of one attempt at a request.
type outcome struct {
	kind    byte // frame.KindOK, frame.KindNotOwner, frame.KindHold or frame.KindError
	resp    wire.Response
	removed bool
	hold    int64 // nanoseconds, for frame.KindHold
	err     error
	retry   bool   // for frame.KindError: the request may be retried elsewhere
	grant   *grant // for frame.KindOK of a lease request: the lease granted
}

// execOwnerLease runs a request as the owner of key (hash h): under the
// key's stripe lock, against the Olric data, with this member's clock, and,
// for a lease request, lx (nil for none) just before Process under the
// key's lock (lease.go). It refuses (frame.KindNotOwner) when this member's
// routing read says another member owns the key, holds (frame.KindHold)
// during a hand-over, on a stale routing read or while shutting down, and
// runs nothing for a caller gone by b (see hold). Callers go through
// execBounded, which bounds their wait.
func (m *Member) execOwnerLease(ctx context.Context, key string, h uint64, req *wire.Request, remove bool, lx *leaseExec, b bound) outcome {
	o, refused, ok := m.exec.hold(ctx, h, b)
	if !ok {
		return refused
	}
	defer m.exec.release(&o)
	if remove {
		if m.leases != nil {
			if wait, held := m.leases.fence.Hold(o.st.leased, key, h%m.cfg.PartitionCount, o.epoch, o.now, nil, nil); held {
				return outcome{kind: frame.KindHold, hold: wait}
			}
		}
		delete(o.st.cache, key)
		m.journal.Drop(key)
		if _, err := m.node.dm.Delete(o.ctx, key); err != nil {
			m.exec.dropped.Store(true) // Olric may still hold it
			return outcome{kind: frame.KindError, err: err, retry: true}
		}
		return outcome{kind: frame.KindOK, removed: true}
	}
	s, failed, ok := m.exec.read(&o, key)
	if !ok {
		return failed
	}
	var rec *fence.Record
	if m.leases != nil {
		if wait, held := m.leases.fence.Hold(o.st.leased, key, h%m.cfg.PartitionCount, o.epoch, o.now, req, s.state); held {
			return outcome{kind: frame.KindHold, hold: wait}
		}
		if lx != nil {
			rec = m.leases.fence.Record(&o.st.leased, key, o.now)
		}
	}
	now := m.cfg.Clock.Now()
	synthetic := false
	if s.state == nil && lost.Creates(req) {
		at := int64(0)
		if m.cfg.LostState == LostEmpty {
			var err error
			if at, err = m.routing.marks.lostAt(&o, now); err != nil {
				return outcome{kind: frame.KindError, err: err, retry: true}
			}
		}
		if at != 0 {
			s.state, synthetic = lost.EmptySince(req, at, now), true
		} else if moved, ok := m.exec.movedSince(&o); ok {
			// A partition that moved lately: a copy may sit on a member
			// the owner's Olric does not list (see readWide).
			w, answered, err := m.exec.readWide(&o, key)
			switch {
			case err != nil:
				return outcome{kind: frame.KindError, err: err, retry: true}
			case w.state != nil:
				s = w
			case !answered && m.cfg.LostState == LostEmpty:
				s.state, synthetic = lost.EmptySince(req, moved, now), true
			}
		}
	}
	if lx != nil {
		lx.prepare(s.state, req, now, o.epoch, rec, o.now)
	}
	newStored, changed, resp := wire.Process(s.state, *req, now)
	if !changed {
		if !s.cached && s.state != nil && !synthetic {
			if f, failed := m.exec.replicate(o.ctx, o.st, key, s.stored, s.expiresAt, o.epoch); failed {
				return f
			}
		}
		return outcome{kind: frame.KindOK, resp: resp}
	}
	// A write during a split advances this member's branch of the
	// bucket's lineage by what it consumed; any other write keeps the
	// lineage it read, so that a merge still finds the branches the state
	// holds (internal/journal).
	stored, branch := journal.Wrap(s.lineage, newStored), journal.Branch{}
	if o.r.split {
		var l journal.Lineage
		l, branch = m.journal.Advance(key, s.lineage, journal.Spent(s.state, newStored, now))
		stored = journal.Wrap(l, newStored)
	}
	if err := m.exec.write(&o, key, stored, resp.TTL); err != nil {
		return outcome{kind: frame.KindError, err: err, retry: true}
	}
	if o.r.split {
		m.journal.Put(key, stored, branch, resp.TTL, m.cfg.Clock.Now())
	}
	if lx != nil {
		lx.granted(&resp, m.mono(), m.leases.fence.Life())
	}
	return outcome{kind: frame.KindOK, resp: resp}
}

// MaxKeyLen is the longest key a Member holds, in bytes. Olric refuses
// keys of 256 bytes or more, and a member stores each bucket under its key
// as given, with no prefix (the DMap's name is not part of the key). Any
// bytes are allowed, the empty key included.
const MaxKeyLen = 255

// checkKey returns a *core.KeyError for a key longer than MaxKeyLen.
func checkKey(key string) error {
	if len(key) > MaxKeyLen {
		return core.InvalidKey(key, "longer than 255 bytes, Olric's limit")
	}
	return nil
}

// Execute implements bucketgrid.Executor: it runs req on the owner of key's
// bucket, in this process when this member owns it, else in one hop over
// the owner channel. It follows ownership changes (re-routing on not-owner
// answers, waiting out hand-overs) until ctx ends; a context without a
// deadline is bounded by Config.RequestTimeout. A key longer than MaxKeyLen
// fails at once, before any I/O, with a *core.KeyError (errors.Is
// core.ErrInvalidKey).
func (m *Member) Execute(ctx context.Context, key string, req wire.Request) (wire.Response, error) {
	if err := checkKey(key); err != nil {
		return wire.Response{}, err
	}
	if m.leases != nil {
		if resp, ok, err := m.executeLeased(ctx, key, &req); ok {
			return resp, err
		}
	}
	o, err := m.do(ctx, key, &req, frame.KindExecute, nil)
	return o.resp, err
}

// Remove implements bucketgrid.Executor: it deletes key's bucket on its
// owner. A key longer than MaxKeyLen fails as in Execute.
func (m *Member) Remove(ctx context.Context, key string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	_, err := m.do(ctx, key, nil, frame.KindRemove, nil)
	return err
}

// do runs a request of the given kind (frame.KindExecute with req, frame.KindRemove,
// or frame.KindMerge with its payload in merge) on key's owner, following
// ownership changes until ctx ends.
func (m *Member) do(ctx context.Context, key string, req *wire.Request, kind byte, merge []byte) (outcome, error) {
	// Without a deadline, RequestTimeout bounds the waits (a timer per
	// request would cost more than the request).
	budget := time.Time{}
	if _, ok := ctx.Deadline(); !ok {
		budget = time.Now().Add(m.cfg.RequestTimeout)
	}
	h := m.hash(key)
	p := h % m.cfg.PartitionCount
	var last error
	backoff := time.Millisecond
	for {
		if m.ctx.Err() != nil || m.exec.leaving.Load() {
			return outcome{}, ErrClosed
		}
		if err := ctx.Err(); err != nil {
			if last != nil {
				return outcome{}, fmt.Errorf("bucketgrid/olric: %w (%v)", err, last)
			}
			return outcome{}, err
		}
		r := m.routing.current()
		if !r.quorum {
			// On the small side of a split: every owner this member can
			// reach is too.
			return outcome{}, ErrNoQuorum
		}
		var o outcome
		switch owner := r.owners[p]; owner {
		case "":
			o = outcome{kind: frame.KindNotOwner}
		case m.name:
			c := ownerCall{kind: kind, key: key, h: h, req: req, merge: merge}
			if !budget.IsZero() {
				c.notAfter = m.mono() + int64(time.Until(budget))
			}
			o = m.exec.execBounded(ctx, &c)
		default:
			o = m.peers.remote(ctx, owner, kind, key, req, merge, remaining(ctx, budget))
		}
		var wait time.Duration
		var read <-chan struct{} // ends the wait early: this member's next routing read
		switch o.kind {
		case frame.KindOK:
			return o, nil
		case frame.KindNoQuorum:
			return outcome{}, ErrNoQuorum
		case frame.KindNotOwner:
			last = errors.New("owner unknown or moved")
			if err := m.routing.waitRefresh(ctx); err != nil {
				return outcome{}, fmt.Errorf("bucketgrid/olric: %w (%v)", err, last)
			}
			if !budget.IsZero() && time.Now().After(budget) {
				return outcome{}, fmt.Errorf("bucketgrid/olric: %w after %v (%v)", context.DeadlineExceeded, m.cfg.RequestTimeout, last)
			}
			continue
		case frame.KindHold:
			last = errors.New("owner holding the key during a hand-over")
			wait = time.Duration(o.hold)
			// The guard may end before o.hold: a read proving the previous
			// owner dead skips it (skipGuards), and a caller waiting out
			// the whole HandoverGrace would stay held for nothing. So the
			// wait ends at this member's next routing read too, or at once
			// if one came since the outcome's: the local guard is then
			// judged again, a remote one at most RoutingRefresh late.
			read = m.routing.nextRead(r)
		default:
			if !o.retry || ctx.Err() != nil {
				return outcome{}, o.err
			}
			last = o.err
			m.routing.kick()
			wait = backoff
			backoff = min(2*backoff, 50*time.Millisecond)
		}
		if !budget.IsZero() && time.Now().Add(wait).After(budget) {
			return outcome{}, fmt.Errorf("bucketgrid/olric: %w after %v (%v)", context.DeadlineExceeded, m.cfg.RequestTimeout, last)
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-read:
			t.Stop()
		case <-ctx.Done():
			t.Stop()
			return outcome{}, fmt.Errorf("bucketgrid/olric: %w (%v)", ctx.Err(), last)
		case <-m.ctx.Done():
			t.Stop()
			return outcome{}, ErrClosed
		}
	}
}

// remaining returns how long the caller still waits: until ctx's deadline,
// or else until budget.
func remaining(ctx context.Context, budget time.Time) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		return time.Until(d)
	}
	return time.Until(budget)
}

// Shutdown leaves the cluster. With ReplicaCount 2 or more it first waits,
// still serving, until no bucket's only copy is on this member: until it
// and every other owner of its routing table report Replicated under that
// one table, which lists every member gossip counts alive (each asked over
// the owner channel). It waits until Config.LeaveTimeout + 1 s
// before ctx's deadline at most (Config.RequestTimeout for a ctx without
// one), then leaves anyway and returns an error matching ErrUnreplicated.
// Then the member stops executing (requests for its buckets are held until
// the other members take the partitions over), waits for executions in
// flight, announces its leave, and leaves gossip (bounded by
// Config.LeaveTimeout). Its Olric still serving, it then waits until the
// routing table no longer lists it and no fragment has come in or gone
// out for 100 ms, so that no other member's balancer moves a fragment to
// it while Olric shuts down (Olric v0.7.4 would race, and can panic, see
// router.settle); that wait is bounded by LeaveTimeout again, and ends
// 0.5 s before ctx's deadline at the latest. Then it shuts Olric down and
// closes its connections. It returns when every goroutine it started has
// ended or ctx ends. With ReplicaCount 1 the
// buckets this member owned are lost (they start empty on their new owner,
// see Config.LostState); with 2 their backups take over.
func (m *Member) Shutdown(ctx context.Context) error {
	m.shutdownOnce.Do(func() { m.shutdownErr = m.shutdown(ctx) })
	return m.shutdownErr
}

func (m *Member) shutdown(ctx context.Context) error {
	left := m.exec.resync.waitCopies(ctx)
	m.exec.drain(ctx)
	m.cancel()
	var err error
	if m.node.dm != nil {
		m.node.dm.Close(ctx)
	}
	if m.node.db != nil {
		m.members.announceLeave(ctx)
		m.members.leave(ctx)
		sctx, cancel := context.WithDeadline(ctx, settleDeadline(ctx, &m.cfg))
		m.routing.settle(sctx) // reads the cluster events: the subscription stays open
		cancel()
	}
	if m.node.sub != nil {
		m.node.sub.Close()
	}
	if m.node.db != nil {
		err = m.node.db.Shutdown(ctx)
		select {
		case <-m.node.startErr:
		case <-ctx.Done():
		}
	}
	m.trust.closeNet()
	m.trust.stop()
	m.channel.close()
	m.peers.close()
	done := make(chan struct{})
	go func() {
		m.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if left != nil {
		return errors.Join(left, err)
	}
	return err
}

// redisLogger adapts a log.Logger to go-redis's logging interface.
type redisLogger struct{ l *log.Logger }

func (r redisLogger) Printf(_ context.Context, format string, v ...any) { r.l.Printf(format, v...) }
