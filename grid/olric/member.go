package olric

import (
	"context"
	"errors"
	"fmt"
	"log"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	olricdb "github.com/olric-data/olric"
	olricconfig "github.com/olric-data/olric/config"
	"github.com/olric-data/olric/events"
	"github.com/olric-data/olric/hasher"
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

	db       *olricdb.Olric
	client   *olricdb.EmbeddedClient
	dm       olricdb.DMap
	sub      *redis.PubSub
	startErr chan error
	joined   atomic.Bool // gossip saw another member
	started  atomic.Bool // Start returned the member

	ctx    context.Context // cancelled by Shutdown
	cancel context.CancelFunc
	wg     sync.WaitGroup

	routes atomic.Pointer[routes]
	kickCh chan struct{}
	genMu  sync.Mutex
	genCh  chan struct{} // closed after each routing read

	exec   ownerExec // the owner side's stripes, drain gate and detached executions (owner.go)
	epochs atomic.Uint64

	// lastEvent is when the member started or last heard of a cluster
	// event, in m.mono nanoseconds (see settleRouting).
	lastEvent atomic.Int64

	channel channel // the owner channel's listener and connections (channel.go)
	trust   guard   // credentials, proofs, revocation, the throttle (trust.go)

	peers peerPool // connections to the other members' owner channels (peers.go)

	members membership // gossip's view beyond routing: healing, quorum
	// incarnation reads this member's gossip incarnation (see
	// gossipIncarnation); nil until start found it, or if it cannot.
	incarnation func() uint32
	deaths      deaths       // members proven dead by a refused connection
	shrinks     atomic.Int64 // routing reads with fewer members than the one before
	// handovers counts the partitions this member guarded after a routing
	// read (acquired, or possibly changed across a gap or a split).
	handovers atomic.Int64
	// readEnd is when (m.mono) the latest routing read attempt returned,
	// failed or not (see refresh, selfStale).
	readEnd atomic.Int64
	journal journal.Journal // buckets written while the cluster was split
	leases  *leaseTable     // nil unless Config.Leases.Enabled

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
		cfg:      cfg,
		name:     net.JoinHostPort(cfg.BindAddr, strconv.Itoa(cfg.BindPort)),
		base:     time.Now(),
		startErr: make(chan error, 1),
		kickCh:   make(chan struct{}, 1),
		genCh:    make(chan struct{}),
		members:  membership{seen: map[string]string{}, joining: map[string]bool{}, left: map[string]time.Time{}},
		deaths:   deaths{proven: map[string]int64{}, probing: map[string]bool{}},
	}
	m.peers.m = m
	m.exec.m, m.exec.stripes = m, make([]stripe, cfg.Stripes)
	if cfg.Leases.Enabled {
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
	oc, err := m.olricConfig(peers)
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
	if m.db, err = olricdb.New(oc); err != nil {
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
		go func() { m.startErr <- m.db.Start() }()
		err := m.start(ctx, peers)
		if err == nil {
			break
		}
		if attempt < maxBootstraps && (errors.Is(err, errBootstrapRace) || errors.Is(err, errStartClientClosed)) && ctx.Err() == nil {
			if err = m.restartOlric(ctx, peers); err == nil {
				continue
			}
		}
		sctx, cancel := context.WithTimeout(context.Background(), cfg.LeaveTimeout+time.Second)
		defer cancel()
		m.Shutdown(sctx)
		return nil, err
	}
	m.started.Store(true)
	return m, nil
}

// Members started at the same moment may disagree on who is Olric's
// coordinator for their first routing table: one that took itself for the
// oldest pushes its table to one that knows an older member, which refuses
// it, and Olric's Start fails. Start then leaves and starts Olric again,
// at most maxBootstraps times in all, within JoinTimeout.
var errBootstrapRace = errors.New("members disagreed on the coordinator while starting together")

// Olric's Start can also fail with go-redis's "redis: client is closed"
// (seen in the test command's race pass at loads of 20 and more, in
// cmd/bucketgrid's and grid/olric's crash tests, members starting
// together; the connection Olric closed under its own start was not
// traced): a start that another attempt passes, so Start starts Olric
// again for it too, within the same bounds.
var errStartClientClosed = errors.New("Olric closed a connection its start was using")

const maxBootstraps = 3

// restartOlric shuts the Olric member of a failed start down and creates
// a new one (a new Birthdate, so a new gossip record).
func (m *Member) restartOlric(ctx context.Context, peers []string) error {
	sctx, cancel := context.WithTimeout(ctx, m.cfg.LeaveTimeout+time.Second)
	defer cancel()
	if m.dm != nil {
		m.dm.Close(sctx)
		m.dm = nil
	}
	if m.sub != nil {
		// A start that failed after subscribing: the subscription would
		// otherwise reconnect to the new Olric at the same address.
		m.sub.Close()
		m.sub = nil
	}
	m.db.Shutdown(sctx)
	select {
	case <-m.startErr:
	case <-sctx.Done():
		return fmt.Errorf("bucketgrid/olric: start: %w", sctx.Err())
	}
	m.trust.forgetSelf()
	m.trust.closeNet()
	oc, err := m.olricConfig(peers)
	if err != nil {
		return err
	}
	db, err := olricdb.New(oc)
	if err != nil {
		m.trust.closeNet()
		return fmt.Errorf("bucketgrid/olric: %w", err)
	}
	m.db = db
	return nil
}

// olricConfig translates the member's configuration into Olric's. With a
// revocation list it binds the gossip address (see gossipNet).
func (m *Member) olricConfig(peers []string) (*olricconfig.Config, error) {
	cfg := &m.cfg
	oc := olricconfig.New(cfg.Env)
	oc.Client = olricconfig.NewClient()
	oc.BindAddr = cfg.BindAddr
	oc.BindPort = cfg.BindPort
	oc.MemberlistConfig.BindAddr = cfg.MemberlistBindAddr
	oc.MemberlistConfig.BindPort = cfg.MemberlistBindPort
	oc.MemberlistConfig.AdvertiseAddr = ""
	oc.MemberlistConfig.AdvertisePort = cfg.MemberlistBindPort
	oc.MemberlistConfig.Keyring = m.trust.creds.keyring
	// Olric sets memberlist's Delegate and Events itself but leaves Alive
	// and Merge alone: they admit only members that proved themselves.
	oc.MemberlistConfig.Alive = gossipGate{m}
	oc.MemberlistConfig.Merge = gossipGate{m}
	if m.trust.creds.client != nil {
		// Olric's own traffic to other members goes through their owner
		// channel's mutual TLS (tunnel.go).
		oc.Client.Dialer = m.peers.dialOlric
	}
	m.failureDetection(oc.MemberlistConfig)
	if m.trust.creds.store != nil && m.trust.creds.store.RevokedFile() != "" {
		g, err := m.newGossipNet()
		if err != nil {
			return nil, err
		}
		m.trust.net = g
		oc.MemberlistConfig.Transport = g
	}
	oc.Authentication = &olricconfig.Authentication{Password: m.trust.creds.password}
	oc.Peers = peers
	// Never form a new cluster when told to join one: Olric would after
	// MaxJoinAttempts; Start gives up at JoinTimeout instead.
	oc.MaxJoinAttempts = math.MaxInt
	oc.JoinRetryInterval = 200 * time.Millisecond
	oc.ReplicaCount = cfg.ReplicaCount
	oc.PartitionCount = cfg.PartitionCount
	oc.LogOutput = cfg.LogOutput
	oc.Logger = log.New(cfg.LogOutput, "", log.LstdFlags)
	oc.LogLevel = olricconfig.LogLevelError
	oc.LogVerbosity = 1
	oc.LeaveTimeout = cfg.LeaveTimeout
	oc.EnableClusterEventsChannel = true
	// A new owner's reads merge the copies of the previous owners and
	// backups its own Olric routing table lists, and that table can miss
	// one: the coordinator drops an owner it finds empty while computing a
	// table, the owner writes meanwhile (its routing lease still runs), and
	// the coordinator, told so with the push, keeps it in its own table
	// only, until the next push (a minute later, or the next membership
	// change). The data reaches the new owner only when the old owner's
	// balancer moves it, every 15 s by default: long after HandoverGrace,
	// so the new owner's first read found the bucket absent and started it
	// full. Balancing every RoutingRefresh moves it within the grace; a
	// balancer run that finds nothing to move only counts the entries of
	// the member's partitions.
	oc.TriggerBalancerInterval = cfg.RoutingRefresh
	// How long an Olric call waits for the member's first routing table.
	// Start retries until JoinTimeout; and the balancer, which runs every
	// RoutingRefresh, waits this long in a member that never got one (a
	// failed start), which its Shutdown then waits for.
	oc.BootstrapTimeout = min(cfg.JoinTimeout, cfg.RoutingLease)
	oc.Hasher = hasher.NewDefaultHasher()
	expiredBucketRelease(oc.DMaps)
	return oc, nil
}

// expiredBucketRelease configures how Olric (v0.7.4) frees the memory of
// expired buckets, which it does in three steps, each slow by default:
//
//   - An expired entry is deleted only when an eviction worker samples it:
//     each worker looks at 19 keys of one random partition, then sleeps
//     100 ms (it never repeats early, as Redis does, although its comment
//     says so: the count that would make it is never incremented). With
//     its default of one worker per CPU, a member deleted at most 380
//     expired buckets a second on 2 CPUs: 4.4 minutes for a flood of
//     100,000. evictionWorkers of them delete up to 12,160 a second.
//   - Each partition's fragment of the DMap keeps its entries in tables of
//     tableSize bytes, allocated whole when the fragment is created: with
//     Olric's 1 MiB, a member holding a key in each of its 271 partitions
//     held 271 MiB for perhaps 30 kB of buckets, so that checks of 271
//     distinct descriptors cost the member 271 MiB of heap.
//   - A fragment whose entries were all deleted is freed at the next empty
//     fragment check (every minute, Olric's default, kept: the check does
//     not take the partition's lock, so a write that found the fragment
//     just before the check freed it is lost from Olric, the owner's cache
//     still holding it, and checking more often would open that window
//     more often); a table whose entries were deleted in part is compacted only
//     when 40 % of it is garbage, at the next compaction (every 10 minutes
//     by default, compactionInterval here), and a table emptied by
//     compaction is freed after being idle for idleTable (15 minutes by
//     default). A write of a bucket also leaves its previous entry in the
//     table as garbage: compaction is what frees a busy bucket's old
//     copies too.
//
// cmd/bucketgrid's TestGridFloodIsReleased measures the result.
func expiredBucketRelease(d *olricconfig.DMaps) {
	const (
		evictionWorkers    = 64
		tableSize          = 64 << 10 // a bucket's entry is a few hundred bytes at most
		compactionInterval = 30 * time.Second
		idleTable          = time.Minute
	)
	d.NumEvictionWorkers = evictionWorkers
	d.TriggerCompactionInterval = compactionInterval
	d.Engine = olricconfig.NewEngine()
	d.Engine.Config["tableSize"] = uint64(tableSize)
	d.Engine.Config["maxIdleTableTimeout"] = idleTable
}

// start waits for Olric to join and become operable and starts the
// member's own services.
func (m *Member) start(ctx context.Context, peers []string) error {
	m.client = m.db.NewEmbeddedClient()
	var err error
	// Olric is operable once it hands out a DMap and its routing table:
	// poll, since its Started callback is unreliable with several members
	// in one process.
	probe := time.After(time.Second)
	for {
		if m.dm == nil {
			var dm olricdb.DMap
			if dm, err = m.client.NewDMap(m.cfg.DMap); err == nil {
				m.dm = dm
			}
		}
		if m.dm != nil {
			// Told to join, a member that no peer let in (Olric forms a
			// cluster of one when gossip took it in but nobody proved
			// himself to it) waits to be let in, else fails.
			if err = m.refresh(ctx); err == nil && (len(peers) == 0 || m.joined.Load()) {
				break
			}
		}
		select {
		case serr := <-m.startErr:
			m.startErr <- serr
			if serr != nil && strings.Contains(serr.Error(), "unrecognized cluster coordinator") {
				return fmt.Errorf("bucketgrid/olric: start: %w: %w", errBootstrapRace, serr)
			}
			if serr != nil && strings.Contains(serr.Error(), "redis: client is closed") {
				return fmt.Errorf("bucketgrid/olric: start: %w: %w", errStartClientClosed, serr)
			}
			return fmt.Errorf("bucketgrid/olric: start: %w", serr)
		case <-m.trust.refused:
			return fmt.Errorf("%w: %w", ErrJoin, m.trust.refusal)
		case <-probe:
			if len(peers) > 0 && !m.joined.Load() {
				if err := probeGossip(ctx, peers); err != nil {
					return err
				}
				m.trust.probeKeys(ctx, peers)
				probe = time.After(time.Second)
			}
		case <-ctx.Done():
			if len(peers) > 0 && !m.joined.Load() {
				if why := m.trust.lastFailure(); why != nil {
					return fmt.Errorf("%w within %v: none of %v let this member in: %w", ErrJoin, m.cfg.JoinTimeout, peers, why)
				}
				return fmt.Errorf("%w within %v: none of %v let this member in (a gossip address of a running member, BindPort+2 by default, and the same GossipKeys?)",
					ErrJoin, m.cfg.JoinTimeout, peers)
			}
			return fmt.Errorf("bucketgrid/olric: start: %w (last: %v)", ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	// Subscribe on this member itself: a subscription on another member
	// would outlive that member and retry its address forever.
	ps, err := m.client.NewPubSub(olricdb.ToAddress(m.name))
	if err != nil {
		return err
	}
	m.sub = ps.Subscribe(m.ctx, events.ClusterEventsChannel, leaveChannel)
	m.lastEvent.Store(m.mono())
	// Olric's memberlist exists once its routing table was read; with it
	// the member heals splits and counts a quorum. Read the table again so
	// that the one published knows the quorum.
	if m.members.ml, err = olricMemberlist(m.db); err != nil {
		return err
	}
	m.incarnation, _ = gossipIncarnation(m.members.ml) // nil: every split's end hands everything over
	if err := m.refresh(ctx); err != nil {
		if strings.Contains(err.Error(), "redis: client is closed") {
			// The same closed connection, met by the last read of start
			// (TestCrash beside 8 busy loops on one core).
			return fmt.Errorf("bucketgrid/olric: start: %w: %w", errStartClientClosed, err)
		}
		return fmt.Errorf("bucketgrid/olric: start: %w", err)
	}
	m.wg.Add(2)
	go m.refresher()
	go m.events(m.sub.Channel())
	if m.cfg.HealInterval > 0 {
		m.wg.Add(1)
		go m.healer()
	}
	return nil
}

// Name returns the member's name in the cluster, BindAddr:BindPort.
func (m *Member) Name() string { return m.name }

// ChannelAddr returns the address of the member's owner channel,
// BindAddr:BindPort+1, where the other members reach it.
func (m *Member) ChannelAddr() string { return m.channel.addr }

// Olric returns the embedded Olric member, for the application's own use of
// the grid. Do not shut it down directly; call Shutdown.
func (m *Member) Olric() *olricdb.Olric { return m.db }

// Client returns an embedded client of the Olric member.
func (m *Member) Client() *olricdb.EmbeddedClient { return m.client }

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
	return m.routes.Load().owners[m.Partition(key)]
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
func (m *Member) LiveInstances() int { return max(m.routes.Load().members, 1) }

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

// execOwner runs a request as the owner of key (hash h): under the key's
// stripe lock, against the Olric data, with this member's clock. It refuses
// (frame.KindNotOwner) when this member's routing read says another member owns
// the key, holds (frame.KindHold) during a hand-over, on a stale routing read or
// while shutting down, and runs nothing for a caller gone by b (see hold).
// Callers go through execBounded, which bounds their wait.
func (m *Member) execOwner(ctx context.Context, key string, h uint64, req *wire.Request, remove bool, b bound) outcome {
	return m.execOwnerLease(ctx, key, h, req, remove, nil, b)
}

// execOwnerLease is execOwner with, for a lease request, lx run just
// before Process under the key's lock (lease.go).
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
		if _, err := m.dm.Delete(o.ctx, key); err != nil {
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
	if s.state == nil && m.cfg.LostState == LostEmpty && lost.Creates(req) {
		if at := o.r.lostAt[h%m.cfg.PartitionCount]; at != 0 {
			s.state, synthetic = lost.EmptySince(req, at, now), true
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
		r := m.routes.Load()
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
			if err := m.waitRefresh(ctx); err != nil {
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
			read = m.nextRead(r)
		default:
			if !o.retry || ctx.Err() != nil {
				return outcome{}, o.err
			}
			last = o.err
			m.kick()
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

// Shutdown leaves the cluster: the member stops executing (requests for
// its buckets are held until the other members take the partitions over),
// waits for executions in flight, shuts Olric down (bounded by
// Config.LeaveTimeout; at most 100 ms later than asked when a cluster
// event came in just before, see settleRouting) and closes its connections. It returns when every
// goroutine it started has ended or ctx ends. With ReplicaCount 1 the
// buckets this member owned are lost (they start empty on their new owner,
// see Config.LostState); with 2 their backups take over.
func (m *Member) Shutdown(ctx context.Context) error {
	m.shutdownOnce.Do(func() { m.shutdownErr = m.shutdown(ctx) })
	return m.shutdownErr
}

// routingSettle is how long after a cluster event (or its start) a member
// waits before shutting Olric down; see settleRouting.
const routingSettle = 100 * time.Millisecond

// settleRouting waits until routingSettle has passed since the member
// started or last heard of a cluster event, or ctx ends. Olric v0.7.4
// serves a routing-table push that is still in flight when it shuts down
// after its routing table stopped waiting for its goroutines, and the push
// then starts one more (a data race in Olric, and a goroutine that outlives
// Shutdown); each cluster event, the member's own join included, sends such
// a push, which lands within milliseconds.
func (m *Member) settleRouting(ctx context.Context) {
	wait := time.Duration(m.lastEvent.Load() + int64(routingSettle) - m.mono())
	if wait <= 0 {
		return
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func (m *Member) shutdown(ctx context.Context) error {
	m.exec.drain(ctx)
	m.cancel()
	if m.sub != nil {
		m.sub.Close()
	}
	var err error
	if m.dm != nil {
		m.dm.Close(ctx)
	}
	if m.db != nil {
		m.announceLeave(ctx)
		m.settleRouting(ctx)
		err = m.db.Shutdown(ctx)
		select {
		case <-m.startErr:
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
		return ctx.Err()
	}
	return err
}

// redisLogger adapts a log.Logger to go-redis's logging interface.
type redisLogger struct{ l *log.Logger }

func (r redisLogger) Printf(_ context.Context, format string, v ...any) { r.l.Printf(format, v...) }
