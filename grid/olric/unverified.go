package olric

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Unverified gossip (see doc.go, Trust). A member counts every gossip
// record it refuses because its node has not proved itself (trust.go), by
// reason, and logs each failed proof within the limits below, so that a
// holder of the gossip key cannot flood the log: one line per gossip
// address per refusalLogEvery, refusalLogBurst lines per refusalLogEvery
// in all. The counts are for tests; nothing outside the package reads
// them.

// Refusal log limits.
const (
	refusalLogEvery = time.Minute
	refusalLogBurst = 16
)

// refusalCounts are a member's gossip records refused as unverified, by
// reason.
type refusalCounts struct {
	noProof int64 // its node's proof was pending (under way or due)
	failed  int64 // its node's proof failed (dial, TLS, answer)
	revoked int64 // its node's certificate is revoked (RevokedFile)
}

// refusals counts and logs unverified gossip (see above).
type refusals struct {
	noProof, failed, revoked atomic.Int64

	mu         sync.Mutex
	why        map[string]error // the last failed proof, by node name
	loggedAt   map[string]int64 // by gossip address, mono nanoseconds
	window     int64            // start of the current burst window
	lines      int              // lines logged in the window
	suppressed int              // lines not logged since the last one
}

// counts returns the refusals counted so far.
func (r *refusals) counts() refusalCounts {
	return refusalCounts{noProof: r.noProof.Load(), failed: r.failed.Load(), revoked: r.revoked.Load()}
}

// revokedProof reports whether a proof from gossip address addr failed
// because the node's certificate is revoked.
func (t *trust) revokedProof(addr string, err error) bool {
	return t.gossipBlocked(addr) || errors.Is(err, errRevoked)
}

// failedProof records that the proof of the node called name, gossiping
// from addr, failed with err, and logs it within the limits.
func (t *trust) failedProof(name, addr string, err error) {
	r := &t.unverified
	why := strings.TrimPrefix(err.Error(), errUnproven.Error()+": "+name+": ")
	reason := "proof failed: " + why
	if t.revokedProof(addr, err) {
		reason = "certificate revoked: " + why
	}
	now := t.m.mono()
	r.mu.Lock()
	if r.why == nil {
		r.why, r.loggedAt = map[string]error{}, map[string]int64{}
	}
	if len(r.why) >= 4*doorSources {
		clear(r.why)
	}
	r.why[name] = err
	if at, ok := r.loggedAt[addr]; ok && now-at < int64(refusalLogEvery) {
		r.mu.Unlock()
		return
	}
	if now-r.window >= int64(refusalLogEvery) || r.lines == 0 {
		r.window, r.lines = now, 0
	}
	if r.lines >= refusalLogBurst {
		r.suppressed++
		r.mu.Unlock()
		return
	}
	r.lines++
	if len(r.loggedAt) >= 4*doorSources {
		for a, at := range r.loggedAt {
			if now-at >= int64(refusalLogEvery) {
				delete(r.loggedAt, a)
			}
		}
		if len(r.loggedAt) >= 4*doorSources {
			clear(r.loggedAt)
		}
	}
	r.loggedAt[addr] = now
	suppressed := r.suppressed
	r.suppressed = 0
	r.mu.Unlock()
	if suppressed > 0 {
		t.m.logf("gossip of node %s from %s refused, unverified: %s (%d similar lines suppressed)", name, addr, reason, suppressed)
		return
	}
	t.m.logf("gossip of node %s from %s refused, unverified: %s", name, addr, reason)
}

// count counts a gossip record of the node called name, gossiping from
// addr, refused with err: err is the failed proof's, or errUnproven when
// the proof is pending, in which case the node's last failed proof, if
// any, gives the reason.
func (t *trust) count(name, addr string, err error) {
	r := &t.unverified
	if err == errUnproven {
		r.mu.Lock()
		last := r.why[name]
		r.mu.Unlock()
		if last == nil {
			if t.gossipBlocked(addr) {
				r.revoked.Add(1)
			} else {
				r.noProof.Add(1)
			}
			return
		}
		err = last
	}
	if t.revokedProof(addr, err) {
		r.revoked.Add(1)
		return
	}
	r.failed.Add(1)
}

// provenNow forgets the failed proof of the node called name.
func (t *trust) provenNow(name string) {
	r := &t.unverified
	r.mu.Lock()
	delete(r.why, name)
	r.mu.Unlock()
}
