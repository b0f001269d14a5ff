package olric

import (
	"context"
	"testing"
	"time"
)

// trackedKeys returns how many keys m keeps lease state (demand, lease)
// for.
func trackedKeys(m *Member) int {
	n := 0
	for i := range m.leases.shards {
		s := &m.leases.shards[i]
		s.mu.Lock()
		n += len(s.keys)
		s.mu.Unlock()
	}
	return n
}

// trackedKey returns m's lease state for key, nil when it keeps none.
func trackedKey(m *Member, key string) *leaseKey {
	h := m.hash(key)
	s := &m.leases.shards[(h>>40)%uint64(len(m.leases.shards))]
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keys[key]
}

// TestLeaseColdKeysKeepNoState: a member that checks many keys of another
// owner once each (10,000 descriptors) keeps no lease state for them and
// asks for no lease: a cold key costs what it costs without leases. A key
// it then checks often still leases.
func TestLeaseColdKeysKeepNoState(t *testing.T) {
	ms := startCluster(t, 2, func(c *Config) { c.Leases.Enabled = true })
	cfg := testBucket(100)
	ctx := context.Background()
	for _, k := range ownedKeys(ms[1], "cold-", 2000) {
		resp, err := ms[0].Execute(ctx, k, consumeReq(&cfg, 1))
		if err != nil {
			t.Fatal(err)
		}
		if !resp.Results[0].OK {
			t.Fatalf("%s: first check refused", k)
		}
	}
	if n := trackedKeys(ms[0]); n != 0 {
		t.Fatalf("lease state kept for %d keys checked once each", n)
	}
	if n := ms[0].leases.local.Load(); n != 0 {
		t.Fatalf("%d checks of keys checked once decided on leases", n)
	}
	hot := ownedKeys(ms[1], "hot-", 1)[0]
	big := testBucket(1 << 20)
	for range 200 {
		if _, err := ms[0].Execute(ctx, hot, consumeReq(&big, 1)); err != nil {
			t.Fatal(err)
		}
	}
	if ms[0].leases.local.Load() == 0 {
		t.Fatal("no check of a key checked 200 times in a row decided on a lease")
	}
}

// TestLeaseGiveBackAtLowDemand: a lease that ends with tokens left gives
// them back with the member's next check of the key even when its demand
// has fallen below MinDemand, so that the owner's bucket then holds
// exactly what was not admitted.
func TestLeaseGiveBackAtLowDemand(t *testing.T) {
	life := 40 * time.Millisecond
	ms := startCluster(t, 2, func(c *Config) {
		c.Leases.Enabled = true
		c.Leases.Lifetime = life
	})
	const capacity = 1 << 20
	cfg := testBucket(capacity)
	ctx := context.Background()
	key := ownedKeys(ms[1], "giveback-", 1)[0]
	var admitted int64
	check := func() {
		t.Helper()
		resp, err := ms[0].Execute(ctx, key, consumeReq(&cfg, 1))
		if err != nil {
			t.Fatal(err)
		}
		if resp.Results[0].OK {
			admitted++
		}
	}
	for range 400 {
		check()
	}
	if ms[0].leases.local.Load() == 0 {
		t.Fatal("no check decided on a lease")
	}
	// A check every three Lifetimes, below MinDemand: the lease ends, and
	// the next check returns its tokens and takes no new lease.
	left := int64(-1)
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		time.Sleep(3 * life)
		check()
		resp, err := ms[1].Execute(ctx, key, availableReq(&cfg))
		if err != nil {
			t.Fatal(err)
		}
		if left = resp.Results[0].Tokens; left == capacity-admitted {
			return
		}
	}
	t.Fatalf("owner's bucket holds %d after %d admitted of %d: leased tokens never came back", left, admitted, capacity)
}

// TestLeaseLowDemandOnSeveralMembers: a key two members each check a few
// times within a Lifetime (demand 2 to 5 at each, below the former
// MinDemand of 8) is leased with the default MinDemand.
func TestLeaseLowDemandOnSeveralMembers(t *testing.T) {
	ms := startCluster(t, 3, func(c *Config) {
		c.Leases.Enabled = true
		c.Leases.Lifetime = 2 * time.Second // the checks fall within one
	})
	cfg := testBucket(1000)
	ctx := context.Background()
	key := ownedKeys(ms[2], "shared-", 1)[0]
	for range 6 {
		for _, m := range ms[:2] {
			if _, err := m.Execute(ctx, key, consumeReq(&cfg, 1)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := leasedChecks(ms); n == 0 {
		t.Fatal("no check of a key checked 6 times on each of two members decided on a lease")
	}
}
