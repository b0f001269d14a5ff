package olric

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestGossipKeyRotation changes the gossip key of a secured 3-member
// cluster in three rolling rounds (install the new key everywhere, use it
// everywhere, remove the old one everywhere) while 6 goroutines check
// buckets through every member, and checks that no request failed, every
// bucket accounts for exactly what was admitted, and no member was ever
// dropped from the routing table. Afterwards the old key cannot join.
func TestGossipKeyRotation(t *testing.T) {
	s := newSecrets(t)
	ms := startCluster(t, 3, s.secure(t))
	old, next := s.gossip, randomKey(t, 32)
	cfg := testBucket(1 << 40)
	keys := keySet("rotate-", 100)
	admitted := make([]atomic.Int64, len(keys))
	var failed atomic.Int64
	var firstErr atomic.Pointer[error]
	minMembers := atomic.Int64{}
	minMembers.Store(3)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 6 {
		m := ms[g%3]
		wg.Go(func() {
			for i := g; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := i % len(keys)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				r, err := m.Execute(ctx, keys[k], consumeReq(&cfg, 1))
				cancel()
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, &err)
					continue
				}
				if r.Results[0].OK {
					admitted[k].Add(1)
				}
				if n := int64(m.routing.current().members); n < minMembers.Load() {
					minMembers.Store(n)
				}
			}
		})
	}
	round := func(name string, f func(m *Member) error) {
		t.Helper()
		for _, m := range ms {
			if err := f(m); err != nil {
				t.Fatalf("%s on %s: %v", name, m.Name(), err)
			}
			time.Sleep(300 * time.Millisecond) // one member after the other
		}
		// Let the members probe and gossip under the new state for a
		// while (the "local" profile probes every second): a mismatch
		// would make them suspect each other and drop one.
		time.Sleep(2 * time.Second)
	}
	round("AddGossipKey", func(m *Member) error { return m.AddGossipKey(next) })
	round("UseGossipKey", func(m *Member) error { return m.UseGossipKey(next) })
	round("RemoveGossipKey", func(m *Member) error { return m.RemoveGossipKey(old) })
	close(stop)
	wg.Wait()

	if n := failed.Load(); n > 0 {
		t.Errorf("%d requests failed, first: %v", n, *firstErr.Load())
	}
	if n := minMembers.Load(); n != 3 {
		t.Errorf("a member saw %d members during the rotation", n)
	}
	var total int64
	for i, k := range keys {
		r, err := ms[i%3].Execute(context.Background(), k, availableReq(&cfg))
		if err != nil {
			t.Fatal(err)
		}
		if used := 1<<40 - r.Results[0].Tokens; used != admitted[i].Load() {
			t.Errorf("%s: %d admitted, %d consumed", k, admitted[i].Load(), used)
		}
		total += admitted[i].Load()
	}
	t.Logf("%d checks during the rotation, none failed", total)
	for _, m := range ms {
		if keys := m.GossipKeys(); len(keys) != 1 || !bytes.Equal(keys[0], next) {
			t.Errorf("%s keyring holds %d keys, want only the new one", m.Name(), len(keys))
		}
	}
	if err := gossipJoin(t, memberlistAddr(ms[0].cfg), [][]byte{old}); err == nil {
		t.Error("the old key still joins")
	}
}

// TestChannelSecretMistake starts, beside a 2-member cluster secured with a
// ChannelSecret, a member with the right gossip key and password but
// another ChannelSecret (an old file, a typo): Start fails with ErrJoin
// naming the certificate, and no member admits it. Before Start waited for a proven peer, it
// started as a cluster of one, Peers notwithstanding, and admitted a full
// capacity on every key.
func TestChannelSecretMistake(t *testing.T) {
	gossip, password := randomKey(t, 32), newSecrets(t).password
	secure := func(secret []byte) func(*Config) {
		return func(c *Config) {
			c.ChannelSecret, c.GossipKeys, c.Password = secret, [][]byte{gossip}, password
		}
	}
	ms := startCluster(t, 2, secure(randomKey(t, 32)))
	c := testConfig(t)
	secure(randomKey(t, 32))(&c)
	c.Peers = []string{memberlistAddr(ms[0].cfg)}
	c.JoinTimeout = 5 * time.Second
	m, err := Start(context.Background(), c)
	if err == nil {
		shutdownAll(t, []*Member{m})
		t.Fatal("started with another ChannelSecret")
	}
	t.Log(err)
	if !errors.Is(err, ErrJoin) || !strings.Contains(err.Error(), "unknown authority") {
		t.Errorf("got %v, want ErrJoin naming the unknown authority", err)
	}
	for _, m := range ms {
		if members, err := m.node.client.Members(context.Background()); err != nil || len(members) != 2 {
			t.Errorf("%s sees %d members (%v), want 2", m.Name(), len(members), err)
		}
		m.trust.mu.Lock()
		_, admitted := m.trust.verified[net.JoinHostPort(c.BindAddr, strconv.Itoa(c.BindPort))]
		m.trust.mu.Unlock()
		if admitted {
			t.Errorf("%s admitted the member with another ChannelSecret", m.Name())
		}
	}
}
