package olric

import (
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bucketgrid/bucketgrid/grid/olric/internal/journal"
)

// wideReadWindow is how long after a routing read changed a partition's
// holders (owner, previous owners or backups) an owner that finds one of
// its buckets absent asks every member's own storage for it before
// creating it (readWide): twice Olric's periodic routing-table push
// (Olric v0.7.4's default RoutingTablePushInterval, one minute), by which
// a member whose Olric missed a push has its table again.
const wideReadWindow = 2 * time.Minute

// olricPeers holds connections to the members' Olric ports, by member
// name, made as Olric makes its own (its dialer, RESP2, AUTH with the
// password): the resyncer's scans and the wide reads use them.
type olricPeers struct {
	m       *Member
	mu      sync.Mutex
	closed  bool
	clients map[string]*redis.Client
}

// errPeersClosed: the member is shutting down.
var errPeersClosed = errors.New("connections to Olric members closed")

// client returns the connection to member h's Olric port.
func (op *olricPeers) client(h string) (*redis.Client, error) {
	op.mu.Lock()
	defer op.mu.Unlock()
	if op.closed {
		return nil, errPeersClosed
	}
	if c, ok := op.clients[h]; ok {
		return c, nil
	}
	m := op.m
	opt := &redis.Options{Network: "tcp", Addr: h, Protocol: 2, Password: m.trust.creds.password, MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true}
	if m.trust.creds.client != nil {
		opt.Dialer = m.peers.dialOlric
	}
	c := redis.NewClient(opt)
	if op.clients == nil {
		op.clients = map[string]*redis.Client{}
	}
	op.clients[h] = c
	return c, nil
}

// close closes every connection; client fails from then on.
func (op *olricPeers) close() {
	op.mu.Lock()
	defer op.mu.Unlock()
	op.closed = true
	for _, c := range op.clients {
		c.Close()
	}
	clear(op.clients)
}

// movedSince returns since when (Config.Clock, Unix nanoseconds) the
// partition of hold o has had its latest change of holders in this
// member's routing reads, when both that change and the latest departure
// of a member (one holding data in a read and not in the next: killed,
// cut off, left) are younger than wideReadWindow; false otherwise. A
// partition that moved only because members joined keeps every holder,
// and Olric's Get reads through previous owners: it pays nothing.
func (oe *ownerExec) movedSince(o *ownerHold) (int64, bool) {
	m := oe.m
	at, left := o.r.movedAt[o.p], o.r.leftAt
	now := m.mono()
	if at == 0 || left == 0 || now-at >= int64(wideReadWindow) || now-left >= int64(wideReadWindow) {
		return 0, false
	}
	return m.cfg.Clock.Now() - (now - at), true
}

// readWide asks every member holding data in o's routing read (o.r.present,
// this one included) for key in its own storage, its primary and its
// backup fragment, whatever its Olric's routing table says, and returns
// the newest copy (by Olric's entry timestamp), s.state nil when none
// holds one. answered is false when a member did not answer before
// RoutingLease/2 passed, refused the connection, or answered with bytes
// that are not an entry of key (newestCopy). A refusal is no answer: the
// member the read names as holding data runs no Olric any more (a graceful
// leaver is not asked, see membership.staying), so it was killed, and
// whatever copy it held died with it (TestAbsentDeadHolderStartsEmpty;
// before, a refusal counted as "no copy there" and the bucket started full). It asks twice when the first round found nothing
// and everyone answered: Olric's balancer copies a fragment before it
// deletes it at the source, so a round that missed a copy in transit has
// it at the destination the second time (see ownerExec.read). err is
// o.ctx's error when the caller stopped waiting.
//
// Olric's Get reads through the members its own routing table lists; when
// the members' tables disagree after a member died (TestCrash, ReplicaCount
// 2, under the race detector), a copy held by a survivor that the owner's
// Olric does not list is not read, and the bucket would start full.
func (oe *ownerExec) readWide(o *ownerHold, key string) (s ownedState, answered bool, err error) {
	for round := 0; round < 2; round++ {
		s, answered = oe.askAll(o, key)
		if err := o.ctx.Err(); err != nil {
			return ownedState{}, false, err
		}
		if s.state != nil || !answered {
			break
		}
	}
	return s, answered, nil
}

// askAll is one round of readWide.
func (oe *ownerExec) askAll(o *ownerHold, key string) (ownedState, bool) {
	m := oe.m
	oe.wideReads.Add(1)
	names := make([]string, 0, len(o.r.present))
	for name := range o.r.present {
		names = append(names, name)
	}
	slices.Sort(names)
	ctx, cancel := context.WithTimeout(o.ctx, m.cfg.RoutingLease/2)
	defer cancel()
	type answer struct {
		entries [][]byte
		ok      bool
	}
	answers := make([]answer, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() {
			answers[i].entries, answers[i].ok = oe.askOne(ctx, name, key)
		})
	}
	wg.Wait()
	all := true
	var entries [][]byte
	for _, a := range answers {
		all = all && a.ok
		entries = append(entries, a.entries...)
	}
	best, decoded := newestCopy(key, entries, time.Now().UnixMilli())
	return best, all && decoded
}

// newestCopy returns the newest unexpired copy of key (by Olric's entry
// timestamp) among entries, as dm.getentry returned them, nowMs the
// current Unix milliseconds; s.state nil when there is none. decoded is
// false when an entry is not one of key in Olric's layout: a member
// answered with something that may be a copy, so the round counts as
// unanswered (the bucket then starts empty, not full, under LostEmpty).
func newestCopy(key string, entries [][]byte, nowMs int64) (s ownedState, decoded bool) {
	bestTS, decoded := int64(-1), true
	for _, raw := range entries {
		e, ok := decodeEntry(raw)
		if !ok || e.key != key {
			decoded = false
			continue
		}
		if e.ttl != 0 && e.ttl <= nowMs || e.timestamp <= bestTS {
			continue
		}
		bestTS = e.timestamp
		s = ownedState{stored: e.value, expiresAt: e.ttl}
	}
	if s.stored != nil {
		s.lineage, s.state = journal.Unwrap(s.stored)
	}
	return s, decoded
}

// askOne asks member name for key in its primary and backup fragments; ok
// is false when it did not answer, a refused connection included.
func (oe *ownerExec) askOne(ctx context.Context, name, key string) (entries [][]byte, ok bool) {
	c, err := oe.resync.peers.client(name)
	if err != nil {
		return nil, false
	}
	dmap := oe.m.cfg.DMap
	cmds := []*redis.StringCmd{
		redis.NewStringCmd(ctx, "dm.getentry", dmap, key),
		redis.NewStringCmd(ctx, "dm.getentry", dmap, key, "RC"),
	}
	pipe := c.Pipeline()
	for _, cmd := range cmds {
		pipe.Process(ctx, cmd)
	}
	pipe.Exec(ctx)
	for _, cmd := range cmds {
		err := cmd.Err()
		switch {
		case err == nil:
			b, _ := cmd.Bytes()
			entries = append(entries, b)
		case strings.HasPrefix(err.Error(), "KEYNOTFOUND"):
		default:
			return entries, false
		}
	}
	return entries, true
}

// entry is an Olric storage entry as dm.getentry returns it.
type entry struct {
	key            string
	ttl, timestamp int64 // Unix milliseconds (0: never) and nanoseconds
	value          []byte
}

// decodeEntry decodes an entry in Olric v0.7.4's kvstore layout: key
// length (1 byte), key, TTL, timestamp and last access (8 bytes each, big
// endian), value length (4 bytes), value. ok is false for anything else.
func decodeEntry(b []byte) (e entry, ok bool) {
	if len(b) < 1 {
		return entry{}, false
	}
	kl := int(b[0])
	b = b[1:]
	if len(b) < kl+28 {
		return entry{}, false
	}
	e.key, b = string(b[:kl]), b[kl:]
	e.ttl = int64(binary.BigEndian.Uint64(b))
	e.timestamp = int64(binary.BigEndian.Uint64(b[8:]))
	vl := int(binary.BigEndian.Uint32(b[24:]))
	b = b[28:]
	if vl != len(b) {
		return entry{}, false
	}
	e.value = b
	return e, true
}
