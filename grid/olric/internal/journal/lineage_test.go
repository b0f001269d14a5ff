package journal

import (
	"bytes"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/core/wire"
)

// now is the instant of every write and merge of these tests: the
// buckets refill hourly, so nothing refills between them.
const now = 1_000_000

// base returns a bucket of 1,000 tokens (refilled hourly) after 10 were
// taken outside any split: the common ancestor of the sides.
func base(t *testing.T) []byte {
	t.Helper()
	cfg, err := core.NewConfig(core.Intervally(1000, 1000, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	s, _, resp := wire.Process(nil, wire.Request{Mode: wire.ModeCreateIfAbsent, Config: &cfg, Ops: []wire.Op{{Kind: wire.OpTryConsume, Tokens: 10}}}, now)
	if resp.Status != wire.StatusOK || !resp.Results[0].OK {
		t.Fatalf("base: %+v", resp)
	}
	return s
}

// consume takes n tokens from core state s.
func consume(t *testing.T, s []byte, n int64) []byte {
	t.Helper()
	out, _, resp := wire.Process(s, wire.Request{Mode: wire.ModeBare, Ops: []wire.Op{{Kind: wire.OpTryConsume, Tokens: n}}}, now)
	if resp.Status != wire.StatusOK || !resp.Results[0].OK {
		t.Fatalf("consume %d: %+v", n, resp)
	}
	return out
}

// split has the member journaling in j take n tokens from stored during a
// split, as an owner writes: the state it stores and journals.
func split(t *testing.T, j *Journal, stored []byte, n int64) []byte {
	t.Helper()
	l, s := Unwrap(stored)
	after := consume(t, s, n)
	l, b := j.Advance("k", l, Spent(s, after, now))
	out := Wrap(l, after)
	j.Put("k", out, b, 0, now)
	return out
}

// whole has a member take n tokens from stored outside a split: the
// lineage it read is kept.
func whole(t *testing.T, stored []byte, n int64) []byte {
	t.Helper()
	l, s := Unwrap(stored)
	return Wrap(l, consume(t, s, n))
}

// tokens returns the tokens of stored at now.
func tokens(t *testing.T, stored []byte) int64 {
	t.Helper()
	_, s := Unwrap(stored)
	n, ok := available(s, now)
	if !ok {
		t.Fatalf("unreadable state %x", stored)
	}
	return n
}

// merge merges incoming into current and checks that it never mints.
func merge(t *testing.T, current, incoming []byte) []byte {
	t.Helper()
	out, changed := Merge(current, incoming, now)
	if !changed && !bytes.Equal(out, current) {
		t.Fatal("Merge changed the state but said it did not")
	}
	if tokens(t, out) > tokens(t, current) {
		t.Fatalf("Merge minted: %d tokens from %d", tokens(t, out), tokens(t, current))
	}
	return out
}

// TestMergeBothSides: both sides consumed since the split (the cut host
// in two writes); whichever side's copy the owner holds, the merge
// subtracts the other's consumption, and the owner's own journal shipped
// to itself, or any journal shipped again, subtracts nothing. The rule
// before (the smaller remainder) kept 690: the majority's 100 forgotten.
func TestMergeBothSides(t *testing.T) {
	var ja, jb Journal
	s0 := base(t)
	a := split(t, &ja, s0, 100)
	b := split(t, &jb, split(t, &jb, s0, 150), 150)
	if tokens(t, a) != 890 || tokens(t, b) != 690 {
		t.Fatalf("sides hold %d and %d, want 890 and 690", tokens(t, a), tokens(t, b))
	}
	const exact = 1000 - 10 - 100 - 300
	for _, tc := range []struct {
		name           string
		current, other []byte
	}{
		{"the majority's copy kept", a, b},
		{"the cut host's copy kept", b, a},
	} {
		got := merge(t, tc.current, tc.other)
		got = merge(t, got, tc.current) // the owner's own journal
		got = merge(t, got, tc.other)   // shipped again after a lost answer
		got = merge(t, got, tc.current)
		if n := tokens(t, got); n != exact {
			t.Errorf("%s: %d tokens after the merges, the exact bucket %d", tc.name, n, exact)
		}
		// Checks after the heal, before the merges arrive, stay counted.
		late := merge(t, merge(t, whole(t, tc.current, 5), tc.other), tc.current)
		if n := tokens(t, late); n != exact-5 {
			t.Errorf("%s, 5 taken after the heal first: %d tokens, want %d", tc.name, n, exact-5)
		}
	}
	// More than the bucket held: the debt stays, refill repays it.
	c := split(t, &ja, a, 500)
	if n := tokens(t, merge(t, c, b)); n != 1000-10-600-300 {
		t.Errorf("overdrawn split: %d tokens, want %d", n, 1000-10-600-300)
	}
}

// TestMergeOneSide: only one side changed the bucket. The owner's copy is
// the one from before the split (the other side wrote nothing): the
// journaled side's consumption is subtracted once. The owner's copy is
// the journaled side's own, written on after the heal (a newer copy along
// the same chain): nothing is subtracted.
func TestMergeOneSide(t *testing.T) {
	var ja Journal
	s0 := base(t)
	a := split(t, &ja, s0, 100)
	if n := tokens(t, merge(t, s0, a)); n != 890 {
		t.Errorf("pre-split copy kept: %d tokens after the merge, want 890", n)
	}
	newer := whole(t, a, 20)
	if got := merge(t, newer, a); !bytes.Equal(got, newer) || tokens(t, got) != 870 {
		t.Errorf("a newer copy of the same chain: %d tokens after the merge, want it unchanged at 870", tokens(t, got))
	}
	// A journaled state older than the owner's, along the same chain.
	a2 := split(t, &ja, a, 30)
	if got := merge(t, a2, a); !bytes.Equal(got, a2) {
		t.Errorf("an older journaled state changed the newer copy: %d tokens", tokens(t, got))
	}
}

// TestMergeThreeWay: a second split before the first merged. Host A takes
// 100; on the other side member B takes 200, then that side splits
// again: B goes on (50 more) and member C, reading B's state, takes 30.
// Whatever copy the owner holds and whatever order the journals arrive
// in (and again, as after lost answers), the bucket ends at the exact
// 1,000 − 10 − 100 − 250 − 30.
func TestMergeThreeWay(t *testing.T) {
	var ja, jb, jc Journal
	s0 := base(t)
	a := split(t, &ja, s0, 100)
	b1 := split(t, &jb, s0, 200)
	b2 := split(t, &jb, b1, 50)
	c := split(t, &jc, b1, 30)
	const exact = 1000 - 10 - 100 - 250 - 30
	states := map[string][]byte{"A": a, "B": b2, "C": c}
	for _, order := range []string{"ABC", "ACB", "BAC", "BCA", "CAB", "CBA"} {
		got := states[order[:1]]
		for _, x := range order[1:] + order {
			got = merge(t, got, states[string(x)])
		}
		if n := tokens(t, got); n != exact {
			t.Errorf("copy %c kept, then %s merged: %d tokens, the exact bucket %d", order[0], order[1:], n, exact)
		}
	}
	// B's journal still holds b2, C's c: C's branch reads b1, not what
	// B last journaled, so B writing on C's state starts a new branch.
	b3 := split(t, &jb, c, 7)
	if l, _ := Unwrap(b3); len(l) != 3 {
		t.Errorf("B writing on C's state: lineage %v, want B's old branch, C's and a new one", l)
	}
	if n := tokens(t, merge(t, merge(t, b3, b2), a)); n != exact-7 {
		t.Errorf("B's new branch merged with its old one and A's: %d tokens, want %d", n, exact-7)
	}
}

// TestMergeNoCommonSplit: copies that share no split. An owner's copy
// from an earlier split, long merged, meets a journal of a new one: only
// the new branch counts. A journaled copy without any branch (never
// written in a split) subtracts nothing, and one whose branches the
// owner's copy lacks entirely subtracts all of them. An absent or
// unreadable copy on the owner takes the journaled one; an unreadable
// journaled one changes nothing.
func TestMergeNoCommonSplit(t *testing.T) {
	s0 := base(t)
	old := Wrap(Lineage{{ID: 7, Consumed: 500}}, consume(t, s0, 40))
	newer := Wrap(Lineage{{ID: 7, Consumed: 500}, {ID: 9, Consumed: 30}}, consume(t, s0, 70))
	if n := tokens(t, merge(t, old, newer)); n != 1000-10-40-30 {
		t.Errorf("an old branch and a new one: %d tokens, want %d", n, 1000-10-40-30)
	}
	if got := merge(t, old, s0); !bytes.Equal(got, old) {
		t.Error("a journaled copy with no branch changed the owner's")
	}
	other := Wrap(Lineage{{ID: 11, Consumed: 25}}, consume(t, s0, 25))
	if n := tokens(t, merge(t, s0, other)); n != 1000-10-25 {
		t.Errorf("disjoint branches: %d tokens, want %d", n, 1000-10-25)
	}
	if got, changed := Merge(nil, other, now); !changed || !bytes.Equal(got, other) {
		t.Error("an absent copy on the owner did not take the journaled one")
	}
	if got, changed := Merge([]byte{0xff}, other, now); !changed || !bytes.Equal(got, other) {
		t.Error("an unreadable copy on the owner did not take the journaled one")
	}
	for _, bad := range [][]byte{nil, {0xff}, {envelope}, {envelope, 1, 0, 0}, Wrap(Lineage{{ID: 3, Consumed: 1}}, []byte{0xff})} {
		if got, changed := Merge(old, bad, now); changed || !bytes.Equal(got, old) {
			t.Errorf("unreadable journaled copy %x changed the owner's", bad)
		}
	}
}

// TestWrap round-trips lineages and refuses malformed envelopes: their
// bytes come back whole, which core refuses as corrupt.
func TestWrap(t *testing.T) {
	s0 := base(t)
	if got := Wrap(nil, s0); !bytes.Equal(got, s0) {
		t.Error("a state without lineage was wrapped")
	}
	l := Lineage{{ID: 1, Consumed: 0}, {ID: 1 << 63, Consumed: 1 << 40}}
	gl, gs := Unwrap(Wrap(l, s0))
	if len(gl) != 2 || gl[0] != l[0] || gl[1] != l[1] || !bytes.Equal(gs, s0) {
		t.Errorf("round trip: %v %x", gl, gs)
	}
	for _, bad := range [][]byte{
		{envelope},
		{envelope, 0},
		{envelope, MaxBranches + 1},
		{envelope, 1, 0, 0, 0, 0, 0, 0, 0, 0, 5}, // ID 0
		{envelope, 1, 0, 0, 0},
	} {
		if gl, gs := Unwrap(bad); gl != nil || !bytes.Equal(gs, bad) {
			t.Errorf("malformed %x: lineage %v, state %x", bad, gl, gs)
		}
	}
	many := Lineage{}
	for i := range MaxBranches + 3 {
		many = many.with(Branch{ID: uint64(i + 1), Consumed: 1})
	}
	if len(many) != MaxBranches || many[0].ID != 4 {
		t.Errorf("bounded lineage %v, want the newest %d", many, MaxBranches)
	}
}

// TestMergeFreshSide: the cut host held no copy of the bucket, so its
// first write of the split created it full, without the consumption made
// before the split (10 here); the majority kept the bucket's history.
// Whichever side's copy the owner holds after the heal, the merge keeps
// every side's consumption: the exact bucket, or less. Subtracting the
// majority's consumption from the cut host's fresh copy gave 500 where
// the exact bucket holds 490 (TestNetHealForgetsNoConsumption's host 1
// case: 1,000 tokens where at most 994 may remain).
func TestMergeFreshSide(t *testing.T) {
	var ja, jb Journal
	s0 := base(t)
	a := split(t, &ja, s0, 200)
	cfg, err := core.NewConfig(core.Intervally(1000, 1000, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	created, _, resp := wire.Process(nil, wire.Request{Mode: wire.ModeCreateIfAbsent, Config: &cfg, Ops: []wire.Op{{Kind: wire.OpAvailableTokens}}}, now)
	if resp.Status != wire.StatusOK {
		t.Fatalf("create: %+v", resp)
	}
	l, b := jb.Advance("k", nil, Spent(nil, consume(t, created, 300), now))
	fresh := Wrap(l, consume(t, created, 300))
	jb.Put("k", fresh, b, 0, now)
	const exact = 1000 - 10 - 200 - 300
	for _, tc := range []struct {
		name           string
		current, other []byte
	}{
		{"the majority's copy kept", a, fresh},
		{"the cut host's fresh copy kept", fresh, a},
	} {
		got := merge(t, merge(t, tc.current, tc.other), tc.current)
		if n := tokens(t, got); n > exact {
			t.Errorf("%s: %d tokens after the merges, more than the exact bucket's %d", tc.name, n, exact)
		}
	}
}
