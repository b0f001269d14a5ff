package trust

import (
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Refusal log limits: one line per gossip address per RefusalLogEvery,
// RefusalLogBurst lines per RefusalLogEvery in all, so that a holder of
// the gossip key cannot flood the log.
const (
	RefusalLogEvery = time.Minute
	RefusalLogBurst = 16
)

// RefusalCounts are a member's gossip records refused as unverified, by
// reason.
type RefusalCounts struct {
	NoProof int64 // its node's proof was pending (under way or due)
	Failed  int64 // its node's proof failed (dial, TLS, answer)
	Revoked int64 // its node's certificate is revoked (RevokedFile); a gossip packet from its address, dropped whole, counts one
}

// Refusals counts the gossip records a member refuses because their node
// has not proved itself, by reason, and decides which failed proofs are
// logged within the limits above. Times are the caller's monotonic
// nanoseconds. Refusals is safe for concurrent use; its zero value is
// ready.
type Refusals struct {
	noProof, failed, revoked atomic.Int64

	mu         sync.Mutex
	why        map[string]error // the last failed proof, by node name
	loggedAt   map[string]int64 // by gossip address
	window     int64            // start of the current burst window
	lines      int              // lines logged in the window
	suppressed int              // lines not logged since the last one
}

// Counts returns the refusals counted so far.
func (r *Refusals) Counts() RefusalCounts {
	return RefusalCounts{NoProof: r.noProof.Load(), Failed: r.failed.Load(), Revoked: r.revoked.Load()}
}

// revokedProof reports whether a proof failed with err because the node's
// certificate is revoked; blocked says its gossip address is a revoked
// node's.
func revokedProof(blocked bool, err error) bool {
	return blocked || errors.Is(err, ErrRevoked)
}

// Failed records that the proof of the node called name, gossiping from
// addr (blocked: the address of a revoked node), failed with err (which
// wraps ErrUnproven with "name: " before the reason), and returns the
// line to log, or "" when the limits suppress it.
func (r *Refusals) Failed(name, addr string, blocked bool, err error, now int64) string {
	why := strings.TrimPrefix(err.Error(), ErrUnproven.Error()+": "+name+": ")
	reason := "proof failed: " + why
	if revokedProof(blocked, err) {
		reason = "certificate revoked: " + why
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.why == nil {
		r.why, r.loggedAt = map[string]error{}, map[string]int64{}
	}
	if len(r.why) >= 4*Sources {
		clear(r.why)
	}
	r.why[name] = err
	if at, ok := r.loggedAt[addr]; ok && now-at < int64(RefusalLogEvery) {
		return ""
	}
	if now-r.window >= int64(RefusalLogEvery) || r.lines == 0 {
		r.window, r.lines = now, 0
	}
	if r.lines >= RefusalLogBurst {
		r.suppressed++
		return ""
	}
	r.lines++
	if len(r.loggedAt) >= 4*Sources {
		for a, at := range r.loggedAt {
			if now-at >= int64(RefusalLogEvery) {
				delete(r.loggedAt, a)
			}
		}
		if len(r.loggedAt) >= 4*Sources {
			clear(r.loggedAt)
		}
	}
	r.loggedAt[addr] = now
	line := "gossip of node " + name + " from " + addr + " refused, unverified: " + reason
	if r.suppressed > 0 {
		line += " (" + strconv.Itoa(r.suppressed) + " similar lines suppressed)"
	}
	r.suppressed = 0
	return line
}

// Count counts a gossip record of the node called name, refused with err
// (blocked: it came from the gossip address of a revoked node): err is
// the failed proof's, or ErrUnproven when the proof is pending, in which
// case the node's last failed proof, if any, gives the reason.
func (r *Refusals) Count(name string, blocked bool, err error) {
	if err == ErrUnproven {
		r.mu.Lock()
		last := r.why[name]
		r.mu.Unlock()
		if last == nil {
			if blocked {
				r.revoked.Add(1)
			} else {
				r.noProof.Add(1)
			}
			return
		}
		err = last
	}
	if revokedProof(blocked, err) {
		r.revoked.Add(1)
		return
	}
	r.failed.Add(1)
}

// Proven forgets the failed proof of the node called name.
func (r *Refusals) Proven(name string) {
	r.mu.Lock()
	delete(r.why, name)
	r.mu.Unlock()
}
