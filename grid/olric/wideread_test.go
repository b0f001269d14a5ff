package olric

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bucketgrid/bucketgrid/core"
)

// available returns the tokens key's bucket (configuration cfg) holds, as
// member m reads it; the read creates an absent bucket.
func available(t *testing.T, m *Member, key string, cfg *core.Config) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := m.Execute(ctx, key, availableReq(cfg))
	if err != nil || len(r.Results) != 1 {
		t.Fatalf("%s: %v %+v", key, err, r)
	}
	return r.Results[0].Tokens
}

// olricCmd runs one command on member h's Olric port, through m's
// connections.
func olricCmd(t *testing.T, m *Member, h string, args ...any) *redis.StringCmd {
	t.Helper()
	c, err := m.exec.resync.peers.client(h)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := redis.NewStringCmd(ctx, args...)
	c.Process(ctx, cmd)
	return cmd
}

// TestAbsentReadsEveryMember builds what TestCrash, ReplicaCount 2, saw
// under the race detector: after a member left and its partitions moved,
// a copy of one of their buckets sits on a member that the owner's Olric
// does not list as a holder of the partition (the members' Olric tables
// disagreed), so the owner's Get finds the bucket absent. The test places
// the copy there itself (Olric's dm.putentry, which writes into a member's
// backup fragment whatever its table says) and checks that the owner
// creates the bucket from it, not full. Before: full (10 tokens, where 3
// were left). It checks too that new buckets of partitions that moved
// only because members joined cost no wide read.
func TestAbsentReadsEveryMember(t *testing.T) {
	ms := startCluster(t, 4, func(c *Config) { c.ReplicaCount = 2 })
	cfg, _ := core.NewConfig(core.Intervally(10, 10, time.Hour))
	// ms[2] joined after ms[0] and ms[1]: its partitions moved to it then,
	// with no member gone.
	for _, k := range ownedKeys(ms[2], "joined-", 10) {
		available(t, ms[0], k, &cfg)
	}
	if ms[2].routing.current().leftAt != 0 {
		t.Log("a member counted gone while the cluster formed (a false death on a loaded machine): the cost check does not apply")
	} else if n := ms[2].exec.wideReads.Load(); n != 0 {
		t.Errorf("%d wide reads for new buckets of partitions that moved only at joins, want 0", n)
	}
	leaver := ms[3]
	var was []string
	for i := 0; len(was) < 50; i++ {
		if k := fmt.Sprint("wide-", i); leaver.Owner(k) == leaver.Name() {
			was = append(was, k)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := leaver.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	ms = ms[:3]
	waitStable(t, ms)
	// A bucket of a partition the leaver owned, not lost (its backup
	// lived), and a member its new owner's read does not list as a holder.
	var key string
	var owner, other *Member
	for _, k := range was {
		o := ms[0].Owner(k)
		for _, m := range ms {
			if m.Name() != o {
				continue
			}
			r, p := m.routing.current(), m.Partition(k)
			if r.lostAt[p] != 0 {
				continue
			}
			for _, x := range ms {
				if !slices.Contains(strings.Split(r.holders[p], ","), x.Name()) {
					key, owner, other = k, m, x
				}
			}
		}
		if key != "" {
			break
		}
	}
	if key == "" {
		t.Fatal("no bucket of the leaver's partitions has a member its new owner does not list")
	}
	if r, err := ms[0].Execute(ctx, key, consumeReq(&cfg, 7)); err != nil || !r.Results[0].OK {
		t.Fatalf("draw: %v %+v", err, r)
	}
	raw, err := olricCmd(t, ms[0], owner.Name(), "dm.getentry", owner.cfg.DMap, key).Bytes()
	if err != nil {
		t.Fatalf("the owner's copy: %v", err)
	}
	if err := ms[0].Remove(ctx, key); err != nil {
		t.Fatal(err)
	}
	if err := olricCmd(t, ms[0], other.Name(), "dm.putentry", owner.cfg.DMap, key, raw).Err(); err != nil {
		t.Fatalf("placing the copy on %s: %v", other.Name(), err)
	}
	if got := available(t, ms[0], key, &cfg); got != 3 {
		t.Errorf("the owner created the bucket with %d tokens, want 3 (the copy on a member its Olric does not list)", got)
	}
}

// TestAbsentUnmovedPaysNothing: an owner creating buckets in partitions
// that never moved (a member alone, whose first read owned everything)
// asks no other member.
func TestAbsentUnmovedPaysNothing(t *testing.T) {
	// A long grace: no gap between reads counts as a hand-over of
	// everything on a loaded machine.
	ms := startCluster(t, 1, func(c *Config) { c.HandoverGrace = 30 * time.Second })
	cfg, _ := core.NewConfig(core.Intervally(10, 10, time.Hour))
	for _, k := range keySet("unmoved-", 20) {
		if got := available(t, ms[0], k, &cfg); got != 10 {
			t.Fatalf("%s: %d tokens, want 10 (a new bucket)", k, got)
		}
	}
	if n := ms[0].exec.wideReads.Load(); n != 0 {
		t.Errorf("%d rounds of asking every member for new buckets of partitions that never moved, want 0", n)
	}
}

// TestReadWideUnanswered: a member that accepts the connection and never
// answers leaves the wide read unanswered (the caller then starts the
// bucket empty under LostEmpty), and so does one that refuses it: a member
// the read names as holding data with no Olric listening was killed, and
// its copies with it (TestAbsentDeadHolderStartsEmpty).
func TestReadWideUnanswered(t *testing.T) {
	ms := startCluster(t, 1, nil)
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusing := closed.Addr().String()
	closed.Close()
	for _, tc := range []struct {
		name   string
		other  string
		answer bool
	}{
		{"silent", silent.Addr().String(), false},
		{"refusing", refusing, false},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		o := ownerHold{r: &routes{present: map[string]struct{}{ms[0].Name(): {}, tc.other: {}}}, ctx: ctx}
		s, answered, err := ms[0].exec.readWide(&o, "never-written")
		cancel()
		if err != nil || s.state != nil || answered != tc.answer {
			t.Errorf("%s: state %v, answered %v, err %v; want none, %v, nil", tc.name, s.state, answered, err, tc.answer)
		}
	}
}

// TestNewestCopyCorruptEntry is a member's storage answering the wide
// read with bytes that are not an entry of the key (a corrupt store, a
// layout this build does not know): the round counts as unanswered, so
// the bucket starts empty rather than full; a good copy beside it is
// still taken, and an expired one is not.
func TestNewestCopyCorruptEntry(t *testing.T) {
	entry := func(key string, ttl, ts int64, value string) []byte {
		b := append([]byte{byte(len(key))}, key...)
		b = binary.BigEndian.AppendUint64(b, uint64(ttl))
		b = binary.BigEndian.AppendUint64(b, uint64(ts))
		b = binary.BigEndian.AppendUint64(b, 0) // last access
		b = binary.BigEndian.AppendUint32(b, uint32(len(value)))
		return append(b, value...)
	}
	const now = int64(1_000_000)
	good := entry("k", 0, 5, "newer")
	for _, tc := range []struct {
		name    string
		entries [][]byte
		want    string
		decoded bool
	}{
		{"none", nil, "", true},
		{"newest of two", [][]byte{entry("k", 0, 4, "older"), good}, "newer", true},
		{"expired", [][]byte{entry("k", now-1, 9, "gone")}, "", true},
		{"garbage", [][]byte{[]byte("not an entry")}, "", false},
		{"another key", [][]byte{entry("x", 0, 9, "other")}, "", false},
		{"truncated", [][]byte{good[:len(good)-1]}, "", false},
		{"garbage beside a copy", [][]byte{[]byte{3}, good}, "newer", false},
	} {
		s, decoded := newestCopy("k", tc.entries, now)
		if string(s.stored) != tc.want || decoded != tc.decoded {
			t.Errorf("%s: copy %q, decoded %v; want %q, %v", tc.name, s.stored, decoded, tc.want, tc.decoded)
		}
	}
}

// TestAbsentDeadHolderStartsEmpty is the hole a killed member leaves in
// the wide read: the owner of one of its partitions reads a routing table
// that still names the dead member as holding data, with no loss recorded
// yet for the partition (Olric drops a dead member from its lists over
// several reads), finds a bucket absent, asks every member its read names,
// and the dead member refuses the connection. Whatever copy the dead member
// held died with it, so the bucket's state is lost and it must start as
// LostEmpty says, not full. Before: full, a refusal counting as "no copy
// there" (10 tokens where none may be assumed).
func TestAbsentDeadHolderStartsEmpty(t *testing.T) {
	ms := startCluster(t, 1, nil)
	m := ms[0]
	m.node.others.Store(true) // a member of a cluster: no lone-member creation
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	cfg, _ := core.NewConfig(core.Intervally(10, 10, time.Hour))
	for try := 0; ; try++ {
		if try == 20 {
			t.Fatal("the member's own routing reads replaced the table under test in 20 tries")
		}
		key := fmt.Sprint("dead-holder-", try)
		cur := m.routing.current()
		p := m.Partition(key)
		nr := *cur
		nr.present = map[string]struct{}{m.Name(): {}, dead: {}}
		nr.movedAt, nr.lostAt = slices.Clone(cur.movedAt), slices.Clone(cur.lostAt)
		nr.movedAt[p], nr.lostAt[p], nr.leftAt = m.mono(), 0, m.mono()
		if !m.routing.table.CompareAndSwap(cur, &nr) {
			continue
		}
		got := available(t, m, key, &cfg)
		if m.routing.current() != &nr {
			continue // a routing read came in between: the check may not have used the table
		}
		if got != 0 {
			t.Errorf("a bucket absent while a holder the read names refused the connection started with %d tokens, want 0 (its state died with that holder)", got)
		}
		return
	}
}
