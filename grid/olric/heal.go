package olric

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"
	"unsafe"

	"github.com/bucketgrid/bucketgrid"
	"github.com/hashicorp/memberlist"
	olricdb "github.com/olric-data/olric"
)

// ErrNoQuorum is returned, with Config.Quorum set, by a member whose gossip
// does not see a majority of the members it last knew: it is on the small
// side of a split and refuses to execute rather than admit a second full
// capacity. The caller's failure mode decides what its clients get.
var ErrNoQuorum = fmt.Errorf("bucketgrid/olric: %w (this member sees a minority of the cluster)", bucketgrid.ErrNoQuorum)

// leaveChannel is the Olric pub/sub channel on which a member announces,
// just before it leaves gracefully, that it leaves: the others forget it
// when they count a quorum.
const leaveChannel = "bucketgrid.leave"

// maxSeen bounds the members a member remembers for healing and quorum.
const maxSeen = 1024

// membership is what a member knows of the cluster beyond Olric's routing
// table: the gossip addresses of the members it saw alive (to ask them
// again after a split), which of them are gone (left, or proven dead) and
// its own gossip incarnation; and the healer, which asks the missing ones
// back.
type membership struct {
	m  *Member
	ml *memberlist.Memberlist // Olric's, found once its routing table was read (see olricMemberlist)
	// incarnation reads this member's gossip incarnation (see
	// gossipIncarnation); nil until start found it, or if it cannot.
	incarnation func() uint32
	deaths      deaths // members proven dead by a refused connection (failover.go)

	mu      sync.Mutex
	seen    map[string]string    // member name → gossip address, for every member seen alive and not known to have left
	joining map[string]bool      // gossip addresses a re-join is in flight to
	left    map[string]time.Time // members that announced a graceful leave, and when
}

// leftHold is how long a member that announced its leave is not counted
// again while gossip still lists it (the leave spreading); after that a
// member of that name (restarted) counts again.
const leftHold = 30 * time.Second

// olricMemberlist returns the memberlist instance inside an Olric member.
// Olric v0.7.4 keeps it unexported (Olric.rt.discovery.memberlist) and
// offers no way to join again after Start, which healing needs; a layout
// that does not match is an error, never a guess.
func olricMemberlist(db *olricdb.Olric) (*memberlist.Memberlist, error) {
	v := reflect.ValueOf(db)
	for _, name := range []string{"rt", "discovery", "memberlist"} {
		if v.Kind() != reflect.Pointer || v.IsNil() {
			return nil, fmt.Errorf("bucketgrid/olric: Olric's member has no %s where v0.7.4 keeps it", name)
		}
		v = v.Elem().FieldByName(name)
		if !v.IsValid() {
			return nil, fmt.Errorf("bucketgrid/olric: Olric's member has no field %s (not Olric v0.7.4's layout)", name)
		}
	}
	if v.Type() != reflect.TypeFor[*memberlist.Memberlist]() {
		return nil, fmt.Errorf("bucketgrid/olric: Olric's memberlist field is a %v", v.Type())
	}
	ml := *(**memberlist.Memberlist)(unsafe.Pointer(v.UnsafeAddr()))
	if ml == nil {
		return nil, errors.New("bucketgrid/olric: Olric's memberlist is not started")
	}
	return ml, nil
}

// note records a member gossip reports alive (memberlist's alive
// delegate, with the message's own node: the records memberlist lists are
// rewritten under its lock, so nothing reads them outside it).
func (ms *membership) note(n *memberlist.Node) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if at, ok := ms.left[n.Name]; ok {
		if time.Since(at) < leftHold {
			return
		}
		delete(ms.left, n.Name)
	}
	if _, ok := ms.seen[n.Name]; ok || len(ms.seen) < maxSeen {
		ms.seen[n.Name] = n.Address()
	}
}

// count returns how many members gossip counts alive now (this member and
// the suspected included) and how many this member knows: those seen alive
// since they joined that did not announce a graceful leave, itself
// included, and never fewer than are alive.
func (ms *membership) count(self string) (alive, known int) {
	alive = ms.ml.NumMembers()
	ms.mu.Lock()
	known = len(ms.seen)
	if _, ok := ms.seen[self]; !ok {
		known++
	}
	ms.mu.Unlock()
	return alive, max(known, alive)
}

// forget drops a member that announced a graceful leave.
func (ms *membership) forget(name string) {
	ms.mu.Lock()
	delete(ms.seen, name)
	if len(ms.left) < maxSeen {
		ms.left[name] = time.Now()
	}
	ms.mu.Unlock()
}

// missing returns the gossip addresses of the members seen alive before
// that own nothing in routing table r: gone from the cluster's view.
func (ms *membership) missing(self string, r *routes) []string {
	present := map[string]bool{}
	if r != nil {
		for _, o := range r.owners {
			present[o] = true
		}
	}
	ms.mu.Lock()
	defer ms.mu.Unlock()
	var out []string
	for name, addr := range ms.seen {
		if name != self && !present[name] {
			out = append(out, addr)
		}
	}
	return out
}

// absent returns the names of the members seen alive before that own
// nothing in the routing table whose owners are given.
func (ms *membership) absent(self string, owners []string) []string {
	present := map[string]bool{}
	for _, o := range owners {
		present[o] = true
	}
	ms.mu.Lock()
	defer ms.mu.Unlock()
	var out []string
	for name := range ms.seen {
		if name != self && !present[name] {
			out = append(out, name)
		}
	}
	return out
}

// healer asks the members this one misses to let it in again, every
// HealInterval: the configured and discovered peers it is not connected
// to and every member it saw alive that gossip now counts dead. A
// partition makes each side declare the other dead, and memberlist never
// contacts a dead member again; a join (push-pull of the full state) from
// either side makes both refute their deaths, so the sides merge within a
// few intervals once the network is back. Each address has at most one
// join in flight.
func (ms *membership) healer() {
	m := ms.m
	defer m.wg.Done()
	t := time.NewTicker(m.cfg.HealInterval)
	defer t.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-t.C:
		}
		r := m.routing.current()
		targets := ms.missing(m.name, r)
		if alive, known := ms.count(m.name); alive < known {
			// Someone is missing: the configured and discovered peers
			// too (a peer of the other side may be one this member never
			// saw, or a new address).
			ctx, cancel := context.WithTimeout(m.ctx, m.cfg.HealInterval)
			if peers, err := m.cfg.joinPeers(ctx); err == nil {
				targets = append(targets, peers...)
			}
			cancel()
		}
		for _, addr := range targets {
			ms.mu.Lock()
			busy := ms.joining[addr]
			ms.joining[addr] = true
			ms.mu.Unlock()
			if busy {
				continue
			}
			m.wg.Add(1)
			go func() {
				defer m.wg.Done()
				if _, err := ms.ml.Join([]string{addr}); err == nil {
					m.routing.kick()
				}
				ms.mu.Lock()
				delete(ms.joining, addr)
				ms.mu.Unlock()
			}()
		}
	}
}

// announceLeave tells the other members, on Olric's pub/sub, that this
// member leaves gracefully, so that they stop counting it for a quorum.
func (ms *membership) announceLeave(ctx context.Context) {
	ms.m.node.announce(ctx, leaveChannel)
}

// announce publishes this member's name on Olric's pub/sub channel, within
// 200 ms of ctx; a member whose Olric has no client yet says nothing.
func (n *node) announce(ctx context.Context, channel string) {
	if n.client == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	ps, err := n.client.NewPubSub()
	if err != nil {
		return
	}
	ps.Publish(ctx, channel, n.m.name)
}

// leave leaves gossip (Olric's memberlist) ahead of Olric's Shutdown,
// which would leave only after stopping the services that other members
// still route to (see router.settle): the others then drop the member
// from the routing table while its Olric still serves. It waits until the
// leave message was sent, at most Config.LeaveTimeout or until ctx's
// deadline. Olric's own Leave later finds the member left and returns at
// once.
func (ms *membership) leave(ctx context.Context) {
	if ms.ml == nil {
		return
	}
	timeout := ms.m.cfg.LeaveTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(d))
	}
	if timeout <= 0 {
		return
	}
	ms.ml.Leave(timeout)
}

// failureDetection sets gossip's probe timings from the configuration:
// fast enough that a crashed member is declared dead in well under a
// second, with gossip four times as frequent as probes so that a member
// suspected wrongly (paused by the scheduler) hears it and refutes in
// time. An unconfirmed suspicion lasts at most twice the confirmed one.
func (ms *membership) failureDetection(mc *memberlist.Config) {
	m := ms.m
	mc.ProbeInterval = m.cfg.ProbeInterval
	mc.ProbeTimeout = m.cfg.ProbeTimeout
	mc.SuspicionMult = m.cfg.SuspicionMult
	mc.SuspicionMaxTimeoutMult = 2
	mc.GossipInterval = min(mc.GossipInterval, m.cfg.ProbeInterval/4)
}
