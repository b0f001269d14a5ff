package olric

import (
	"context"
	"errors"
	"fmt"
	"log"
	"math"
	"strings"
	"sync/atomic"
	"time"

	olricdb "github.com/olric-data/olric"
	olricconfig "github.com/olric-data/olric/config"
	"github.com/olric-data/olric/events"
	"github.com/olric-data/olric/hasher"
	"github.com/redis/go-redis/v9"
)

// node is the embedded Olric member's lifecycle: the Olric instance, its
// embedded client, the DMap that holds the buckets, the subscription to
// the cluster's events, and how its start went. Start creates it, start
// waits for it to join, restart replaces one whose start failed.
type node struct {
	m  *Member
	db *olricdb.Olric
	// olricClient is Olric's client configuration, as Olric completed it
	// in olricdb.New: a routing push on an ask dials with it (repush.go).
	olricClient *olricconfig.Client
	client      *olricdb.EmbeddedClient
	dm          olricdb.DMap
	sub         *redis.PubSub
	startErr    chan error  // what Olric's Start returned (buffered: one)
	joined      atomic.Bool // gossip saw another member
	// others is set once gossip named another member, proven or not
	// (NotifyAlive, NotifyMerge), and never cleared: its Olric may from
	// then on hold buckets and lost marks this member did not write (see
	// ownerExec.whole and lostMarks.lostAt). Another member reaches this
	// one's Olric storage only once this one's gossip knows it (Olric's
	// routing tables and moves follow gossip's membership).
	others  atomic.Bool
	started atomic.Bool // Start returned the member
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

// restart shuts the Olric member of a failed start down and creates
// a new one (a new Birthdate, so a new gossip record).
func (n *node) restart(ctx context.Context, peers []string) error {
	m := n.m
	sctx, cancel := context.WithTimeout(ctx, m.cfg.LeaveTimeout+time.Second)
	defer cancel()
	if n.dm != nil {
		n.dm.Close(sctx)
		n.dm = nil
	}
	if n.sub != nil {
		// A start that failed after subscribing: the subscription would
		// otherwise reconnect to the new Olric at the same address.
		n.sub.Close()
		n.sub = nil
	}
	n.db.Shutdown(sctx)
	select {
	case <-n.startErr:
	case <-sctx.Done():
		return fmt.Errorf("bucketgrid/olric: start: %w", sctx.Err())
	}
	m.trust.forgetSelf()
	m.trust.closeNet()
	oc, err := n.config(peers)
	if err != nil {
		return err
	}
	db, err := olricdb.New(oc)
	if err != nil {
		m.trust.closeNet()
		return fmt.Errorf("bucketgrid/olric: %w", err)
	}
	n.db, n.olricClient = db, oc.Client
	return nil
}

// config translates the member's configuration into Olric's. With a
// revocation list it binds the gossip address (see gossipNet).
func (n *node) config(peers []string) (*olricconfig.Config, error) {
	m := n.m
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
	m.members.failureDetection(oc.MemberlistConfig)
	if m.trust.creds.store != nil && m.trust.creds.store.RevokedFile() != "" {
		g, err := m.trust.newGossipNet()
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
func (n *node) start(ctx context.Context, peers []string) error {
	m := n.m
	n.client = n.db.NewEmbeddedClient()
	var err error
	// Olric is operable once it hands out a DMap and its routing table:
	// poll, since its Started callback is unreliable with several members
	// in one process.
	probe := time.After(time.Second)
	for {
		if n.dm == nil {
			var dm olricdb.DMap
			if dm, err = n.client.NewDMap(m.cfg.DMap); err == nil {
				n.dm = dm
			}
		}
		if n.dm != nil {
			// Told to join, a member that no peer let in (Olric forms a
			// cluster of one when gossip took it in but nobody proved
			// himself to it) waits to be let in, else fails.
			if err = m.routing.refresh(ctx); err == nil && (len(peers) == 0 || n.joined.Load()) {
				break
			}
		}
		select {
		case serr := <-n.startErr:
			n.startErr <- serr
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
			if len(peers) > 0 && !n.joined.Load() {
				if err := probeGossip(ctx, peers); err != nil {
					return err
				}
				m.trust.probeKeys(ctx, peers)
				probe = time.After(time.Second)
			}
		case <-ctx.Done():
			if len(peers) > 0 && !n.joined.Load() {
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
	ps, err := n.client.NewPubSub(olricdb.ToAddress(m.name))
	if err != nil {
		return err
	}
	n.sub = ps.Subscribe(m.ctx, events.ClusterEventsChannel, leaveChannel, repushChannel)
	m.routing.lastEvent.Store(m.mono())
	// Olric's memberlist exists once its routing table was read; with it
	// the member heals splits and counts a quorum. Read the table again so
	// that the one published knows the quorum.
	if m.members.ml, err = olricMemberlist(n.db); err != nil {
		return err
	}
	m.members.incarnation, _ = gossipIncarnation(m.members.ml) // nil: every split's end hands everything over
	if m.routing.stale.or, err = newOlricRouting(n.db, n.olricClient); err != nil {
		m.logf("%v: a member that misses a routing push waits for Olric's next one", err)
	}
	if err := m.routing.refresh(ctx); err != nil {
		if strings.Contains(err.Error(), "redis: client is closed") {
			// The same closed connection, met by the last read of start
			// (TestCrash beside 8 busy loops on one core).
			return fmt.Errorf("bucketgrid/olric: start: %w: %w", errStartClientClosed, err)
		}
		return fmt.Errorf("bucketgrid/olric: start: %w", err)
	}
	m.wg.Add(3)
	go m.routing.refresher()
	go m.routing.events(n.sub.Channel())
	go m.exec.resync.run()
	m.exec.resync.kick()
	if m.cfg.HealInterval > 0 {
		m.wg.Add(1)
		go m.members.healer()
	}
	return nil
}
