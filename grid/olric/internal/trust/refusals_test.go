package trust

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestUnverifiedLogBounded is an attacker with the gossip key forging
// records under many gossip addresses, each of which a member fails to
// verify: RefusalLogBurst lines are logged, then none until the window
// ends; the next line says how many were suppressed. A revoked node's
// failures are counted and logged as revoked.
func TestUnverifiedLogBounded(t *testing.T) {
	var r Refusals
	now := int64(time.Hour)
	var lines []string
	fail := fmt.Errorf("%w: x: tls: handshake failure", ErrUnproven)
	for i := range 10 * RefusalLogBurst {
		addr := net.JoinHostPort("10.0.0.1", strconv.Itoa(1000+i))
		if l := r.Failed(addr, addr, false, fail, now); l != "" {
			lines = append(lines, l)
		}
		r.Count(addr, false, ErrUnproven)
	}
	if len(lines) != RefusalLogBurst {
		t.Errorf("%d lines for %d forged nodes, want %d", len(lines), 10*RefusalLogBurst, RefusalLogBurst)
	}
	// The window ends: one more line, with the count of those suppressed.
	now += int64(RefusalLogEvery)
	l := r.Failed("10.0.0.2:1", "10.0.0.2:1", false, fmt.Errorf("%w: y: %w", ErrUnproven, ErrRevoked), now)
	r.Count("10.0.0.2:1", false, ErrUnproven)
	want := fmt.Sprintf("(%d similar lines suppressed)", 9*RefusalLogBurst)
	if !strings.Contains(l, "10.0.0.2:1") || !strings.Contains(l, want) || !strings.Contains(l, "revoked") {
		t.Errorf("after the window: %q, want a line naming the node, saying revoked and %s", l, want)
	}
	if c := r.Counts(); c != (RefusalCounts{Failed: 10 * RefusalLogBurst, Revoked: 1}) {
		t.Errorf("counts %+v, want %d failed and 1 revoked", c, 10*RefusalLogBurst)
	}
}

// TestRefusalsOneLinePerAddress: a node failing again from the same
// gossip address is logged once per RefusalLogEvery; a pending proof of
// a node from a revoked node's address counts as revoked, one whose proof
// never failed as pending, and a proven node's failure is forgotten.
func TestRefusalsOneLinePerAddress(t *testing.T) {
	var r Refusals
	now := int64(time.Hour)
	fail := fmt.Errorf("%w: n: dial refused", ErrUnproven)
	if r.Failed("n", "a:1", false, fail, now) == "" {
		t.Fatal("the first failure was not logged")
	}
	if l := r.Failed("n", "a:1", false, fail, now+int64(RefusalLogEvery)-1); l != "" {
		t.Fatalf("logged again within the window: %q", l)
	}
	if r.Failed("n", "a:1", false, fail, now+int64(RefusalLogEvery)) == "" {
		t.Fatal("not logged after the window")
	}
	r.Count("n", false, ErrUnproven) // its last proof failed
	r.Proven("n")
	r.Count("n", false, ErrUnproven) // pending, nothing failed since
	r.Count("m", true, ErrUnproven)  // pending, from a revoked address
	if c := r.Counts(); c != (RefusalCounts{NoProof: 1, Failed: 1, Revoked: 1}) {
		t.Errorf("counts %+v, want one of each", c)
	}
}
