package olric

import (
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/grid/olric/internal/trust"
)

// unverifiedLines returns the lines of logs that name addr and
// "unverified".
func unverifiedLines(logs string, addr string) []string {
	var out []string
	for l := range strings.Lines(logs) {
		if strings.Contains(l, addr) && strings.Contains(l, "unverified") {
			out = append(out, l)
		}
	}
	return out
}

// TestUnverifiedGossipCounted is an attacker holding only the gossip key
// (the rogue of TestRogueMember, its owner channel plain TCP) joining a
// secured 2-member grid again and again. Every member counts the records
// it refuses and logs one line naming the attacker's gossip address,
// "unverified" and why; the attempts that follow within a minute log
// nothing more. Before, the members refused it without a count or a line
// of their own.
func TestUnverifiedGossipCounted(t *testing.T) {
	s := newSecrets(t)
	var mu sync.Mutex
	logs := map[int]*syncBuffer{} // by BindPort
	ms := startCluster(t, 2, func(c *Config) {
		s.secure(t)(c)
		b := &syncBuffer{}
		mu.Lock()
		logs[c.BindPort] = b
		mu.Unlock()
		c.LogOutput = b
	})
	logOf := func(m *Member) string {
		mu.Lock()
		defer mu.Unlock()
		return logs[m.cfg.BindPort].String()
	}
	var seeds []string
	for _, m := range ms {
		seeds = append(seeds, memberlistAddr(m.cfg))
	}
	t0 := time.Now()
	r := startRogue(t, seeds, [][]byte{s.gossip}, 1, nil, "")
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(r.port+2))
	failedAt := func(m *Member) (int64, bool) {
		m.trust.mu.Lock()
		defer m.trust.mu.Unlock()
		at, ok := m.trust.failedAt[r.name]
		return at, ok
	}
	everyMember := func(cond func(m *Member) bool) func() bool {
		return func() bool {
			for _, m := range ms {
				if !cond(m) {
					return false
				}
			}
			return true
		}
	}
	if !waitFor(t, "log", 60*time.Second, everyMember(func(m *Member) bool {
		return len(unverifiedLines(logOf(m), addr)) > 0 && m.trust.unverified.Counts().Failed > 0
	})) {
		for _, m := range ms {
			t.Errorf("%s: refused %+v, logged %q", m.Name(), m.trust.unverified.Counts(), unverifiedLines(logOf(m), addr))
		}
		t.FailNow()
	}
	// Again and again: each join is a new proof that fails.
	const attempts = 5
	for i := range attempts {
		before := map[*Member]int64{}
		for _, m := range ms {
			before[m], _ = failedAt(m)
		}
		if _, err := r.ml.Join(seeds); err != nil {
			t.Fatalf("attempt %d: the rogue could not join gossip: %v", i, err)
		}
		if !waitFor(t, "retry", 60*time.Second, everyMember(func(m *Member) bool {
			at, _ := failedAt(m)
			return at != before[m]
		})) {
			t.Fatalf("attempt %d: not every member tried the rogue's proof again", i)
		}
	}
	elapsed := time.Since(t0)
	limit := 1 + int(elapsed/trust.RefusalLogEvery) // one a minute per node
	for _, m := range ms {
		c := m.trust.unverified.Counts()
		if c.Failed+c.NoProof < attempts || c.Revoked != 0 {
			t.Errorf("%s: refused records %+v, want at least %d failed or pending and none revoked", m.Name(), c, attempts)
		}
		lines := unverifiedLines(logOf(m), addr)
		if len(lines) < 1 || len(lines) > limit {
			t.Errorf("%s: %d lines about %s in %v, want 1 to %d: %q", m.Name(), len(lines), addr, elapsed.Round(time.Millisecond), limit, lines)
		}
		for _, l := range lines {
			if !strings.Contains(l, "proof failed") || !strings.Contains(l, r.name) {
				t.Errorf("%s: the line does not name the node %s and why: %q", m.Name(), r.name, l)
			}
		}
		t.Logf("%s: refused %+v, logged %q", m.Name(), c, lines)
	}
}
