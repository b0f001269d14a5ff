package olric

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/bucketgrid/bucketgrid/grid/olric/internal/frame"
)

// What a graceful leave waits for: that no bucket's only copy is on the
// member leaving.

// ErrUnreplicated is returned by Member.Shutdown (wrapped, with what was
// missing; errors.Is matches it) when, with ReplicaCount 2 or more, its
// context ended before every member vouched for copies of every bucket:
// the member left anyway, and a bucket whose only copy it held starts over
// on its new owner (see Config.LostState). Give Shutdown more time, or
// stop members less often.
var ErrUnreplicated = errors.New("bucketgrid/olric: left before every bucket had a copy on another member")

// leaveReserve is what Shutdown keeps of its context for the leave itself
// once it stops waiting for copies: leaving gossip (Config.LeaveTimeout)
// and a second for the drain, the wait until nothing routes to the member
// (settleDeadline), shutting Olric down and closing.
func leaveReserve(cfg *Config) time.Duration { return cfg.LeaveTimeout + time.Second }

// settleReserve is what Shutdown keeps of its context for shutting Olric
// down and closing once it stops waiting for nothing to route to it.
const settleReserve = 500 * time.Millisecond

// settleDeadline is when Shutdown stops waiting, once it left gossip, for
// nothing to route to the member any more (router.settle): after
// Config.LeaveTimeout, or settleReserve before ctx's deadline if that
// comes first. Leaving gossip takes at most LeaveTimeout of leaveReserve,
// so the wait has at least the rest but settleReserve.
func settleDeadline(ctx context.Context, cfg *Config) time.Time {
	d := time.Now().Add(cfg.LeaveTimeout)
	if cd, ok := ctx.Deadline(); ok && cd.Add(-settleReserve).Before(d) {
		d = cd.Add(-settleReserve)
	}
	return d
}

// waitCopies waits, before a graceful leave with ReplicaCount 2 or more,
// until no bucket's only copy is on this member: until this member and
// every other owner in its routing table vouch (vouch, answer) for their
// partitions under one routing table, which lists as many members as
// gossip counts alive. Every partition's owner and backups then hold each
// of its buckets, so a copy outlives this member's leave. It gives up
// leaveReserve before ctx's deadline (after Config.RequestTimeout for a
// ctx without one), or when ctx ends, with an error matching
// ErrUnreplicated; it asks at least once. A member gossip counts alone
// has no one to leave copies with and does not wait.
//
// It protects against this member's own leave only: two members leaving
// at once may each see the other's copies and take both.
func (rs *resyncer) waitCopies(ctx context.Context) error {
	m := rs.m
	if m.cfg.ReplicaCount < 2 || !m.node.started.Load() || m.members.ml == nil {
		return nil
	}
	deadline, ok := ctx.Deadline()
	if ok {
		deadline = deadline.Add(-leaveReserve(&m.cfg))
	} else {
		deadline = time.Now().Add(m.cfg.RequestTimeout)
	}
	wctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	poll := min(m.cfg.RoutingRefresh, 100*time.Millisecond)
	for {
		why := rs.copied(wctx)
		if why == "" {
			return nil
		}
		t := time.NewTimer(poll)
		select {
		case <-t.C:
		case <-wctx.Done():
			t.Stop()
			return fmt.Errorf("%w: %s", ErrUnreplicated, why)
		}
	}
}

// copied returns "" when every bucket has a copy besides this member's
// (see waitCopies), else why it cannot tell yet: what each member that
// did not vouch said. It asks the other owners at once, so that one that
// does not answer delays none of the others' answers.
func (rs *resyncer) copied(ctx context.Context) string {
	m := rs.m
	if m.members.ml.NumMembers() <= 1 {
		return ""
	}
	r := m.routing.current()
	if why := rs.vouch(r); why != "" {
		return "this member: " + why
	}
	print := routesPrint(r)
	var others []string
	asked := map[string]bool{m.name: true}
	for _, o := range r.owners {
		if o != "" && !asked[o] {
			asked[o] = true
			others = append(others, o)
		}
	}
	errs := make([]error, len(others))
	var wg sync.WaitGroup
	for i, o := range others {
		wg.Go(func() { errs[i] = m.peers.askReplicated(ctx, o, print) })
	}
	wg.Wait()
	var why []string
	for i, err := range errs {
		if err != nil {
			why = append(why, fmt.Sprintf("member %s: %v", others[i], err))
		}
	}
	return strings.Join(why, "; ")
}

// vouch returns "" when, as of routing read r, every bucket of every
// partition this member owns has a copy on the partition's owner and on
// each of its backups (Replicated) and r lists as many members as gossip
// counts alive; else why not. A split does not count: the members gossip
// misses are not asked, and their side keeps its own copies.
func (rs *resyncer) vouch(r *routes) string {
	m := rs.m
	if r == nil || m.members.ml == nil {
		return "no routing table read yet"
	}
	if alive := m.members.ml.NumMembers(); r.members != alive {
		return fmt.Sprintf("its routing table lists %d members, its gossip %d", r.members, alive)
	}
	if n := len(rs.pending(r)); n > 0 {
		return fmt.Sprintf("%d partitions it owns not re-replicated yet", n)
	}
	return ""
}

// answer answers request id, a frame.KindReplicated asking (payload: a
// routing fingerprint) whether this member vouches for its partitions
// under that routing table: frame.KindOK, or frame.KindError with why not.
func (rs *resyncer) answer(dst []byte, id uint64, payload []byte) []byte {
	print, _, err := frame.Uvarint(payload)
	if err != nil {
		return appendErrorFrame(dst, id, err)
	}
	r := rs.m.routing.current()
	why := rs.vouch(r)
	if why == "" && routesPrint(r) != print {
		why = "its routing table differs"
	}
	if why != "" {
		return appendErrorFrame(dst, id, fmt.Errorf("not replicated: %s", why))
	}
	start := len(dst)
	dst = frame.AppendHeader(dst, id, frame.KindOK)
	return frame.Finish(dst, start)
}

// routesPrint is a fingerprint of routing read r's table: every
// partition's owner and backups.
func routesPrint(r *routes) uint64 {
	h := xxhash.New()
	var n [binary.MaxVarintLen64]byte
	for p := range r.owners {
		for _, s := range []string{r.owners[p], r.replicas[p]} {
			h.Write(n[:binary.PutUvarint(n[:], uint64(len(s)))])
			h.WriteString(s)
		}
	}
	return h.Sum64()
}
