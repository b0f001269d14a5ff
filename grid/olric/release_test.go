package olric

import (
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/grid/olric/internal/frame"
	"github.com/bucketgrid/bucketgrid/grid/olric/internal/journal"
)

// releaseMember returns a member built by hand, with 4 partitions and no
// Olric, whose newest routing read makes it the owner of the partitions in
// own (the others owned by "b:1").
func releaseMember(t *testing.T) *Member {
	t.Helper()
	m := &Member{name: "a:1", base: time.Now(), cfg: Config{DMap: "bucketgrid.buckets", PartitionCount: 4,
		RoutingRefresh: 250 * time.Millisecond, RoutingLease: time.Second, HandoverGrace: 1500 * time.Millisecond}}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	t.Cleanup(m.cancel)
	m.routing.init(m)
	m.exec.m, m.exec.stripes = m, make([]stripe, 1)
	m.exec.track = make([]partTrack, 4)
	m.members = membership{m: m, seen: map[string]string{"a:1": "", "b:1": "", "c:1": ""}}
	return m
}

// publish makes a read in which m owns the partitions in own its newest.
func publish(m *Member, own ...int) *routes {
	r := &routes{owners: make([]string, 4), guardUntil: make([]int64, 4), epoch: make([]uint64, 4),
		start: m.mono(), quorum: true}
	r.leaseEnd = m.base.Add(time.Duration(r.start) + m.cfg.RoutingLease)
	r.lease, r.leaseCancel = context.WithDeadline(m.ctx, r.leaseEnd)
	for p := range r.owners {
		r.owners[p] = "b:1"
		if slices.Contains(own, p) {
			r.owners[p] = m.name
		}
	}
	m.routing.table.Store(r)
	return r
}

// askAll asks m, as another member would, about all 4 partitions and
// returns its parsed answer.
func askAll(t *testing.T, m *Member) released {
	t.Helper()
	payload := binary.AppendUvarint(nil, 4)
	for p := range 4 {
		payload = binary.AppendUvarint(payload, uint64(p))
	}
	out := m.exec.answerRelease(nil, 7, payload)
	id, kind, body, err := frame.Parse(out[4:])
	if err != nil || id != 7 || kind != frame.KindReleased {
		t.Fatalf("answer: id %d kind %d err %v (%q), want id 7 KindReleased", id, kind, err, body)
	}
	a, err := parseReleased(body, 4)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// keyOf returns a key of partition p.
func keyOf(m *Member, p uint64) string {
	for i := 0; ; i++ {
		if k := "k" + strconv.Itoa(i); m.Partition(k) == p {
			return k
		}
	}
}

// TestReleaseAnswer checks what a member answers another's release
// request: a partition its newest read makes it own it revokes for
// HandoverGrace (it holds it) and answers released (1); one with an
// execution in flight may still execute (0), even under an older read
// (the one the other side of a split gave it), and a member still
// split answers as well; one whose execution
// ended with an error is released only once that read's lease ended (a
// store call may still land), one never executed at once (1); every
// partition's unmerged journal buckets are counted, and a partition
// executed with a whole view is reported moved.
func TestReleaseAnswer(t *testing.T) {
	m := releaseMember(t)
	publish(m, 0, 1)
	// An execution of partition 1 under the read that gave it to m.
	h := m.hash(keyOf(m, 1))
	o, refused, ok := m.exec.hold(context.Background(), h, bound{})
	if !ok {
		t.Fatalf("hold refused: %+v", refused)
	}
	// Partition 1 moved away meanwhile; m's view is still split (so it
	// counts its journal but does not ship it: no Olric here).
	publish(m, 0).split = true
	m.journal.Put(keyOf(m, 3), journal.Wrap(nil, []byte{1}), journal.Branch{}, 0, 0)
	a := askAll(t, m)
	if want := []uint64{1, 0, 1, 1}; !slices.Equal(a.state, want) {
		t.Errorf("with partition 0 owned and an execution of 1 in flight: states %v, want %v", a.state, want)
	}

	if want := []uint64{0, 0, 0, 1}; !slices.Equal(a.pending, want) {
		t.Errorf("journal of partition 3: pending %v, want %v", a.pending, want)
	}
	slices.Sort(a.names)
	if want := []string{"b:1", "c:1"}; !slices.Equal(a.names, want) {
		t.Errorf("names %v, want %v", a.names, want)
	}
	if slices.Contains(a.moved, true) {
		t.Errorf("moved %v before any execution ended", a.moved)
	}
	m.exec.release(&o, true) // ended with an error: its Put may still land
	// Partition 0, owned, was revoked for HandoverGrace by the answer.
	if _, refused, ok := m.exec.hold(context.Background(), m.hash(keyOf(m, 0)), bound{}); ok || refused.kind != frame.KindHold || refused.hold <= 0 || refused.hold > int64(m.cfg.HandoverGrace) {
		t.Errorf("partition 0 after the answer: executes %v, %+v; want held for at most HandoverGrace", ok, refused)
	}
	a = askAll(t, m)
	// It ran under a read made with m's view whole, and m never split:
	// partition 1 was handed to m, not kept by a stale table.
	if want := []bool{false, true, false, false}; !slices.Equal(a.moved, want) {
		t.Errorf("after an execution of partition 1 with a whole view: moved %v, want %v", a.moved, want)
	}
	left := int64(o.r.start) + int64(m.cfg.RoutingLease) - m.mono()
	if st := a.state[1]; st <= 1 || int64(st-1) > int64(m.cfg.RoutingLease) || left > 0 && int64(st-1) < left-int64(time.Second/10) {
		t.Errorf("after a failed execution: state %d, want 1 plus about %v (its read's lease end)", st, time.Duration(left))
	}
	if a.state[0] != 1 || a.state[2] != 1 {
		t.Errorf("states %v: partition 0 revoked (1), 2 never executed (1)", a.state)
	}
}

// TestReleaseAnswerMalformed checks that a request naming a partition
// that does not exist, or with bytes after its list, is refused.
func TestReleaseAnswerMalformed(t *testing.T) {
	m := releaseMember(t)
	publish(m, 0)
	for _, payload := range [][]byte{{1, 4}, {1, 0, 9}, {5, 0, 1, 2, 3, 0}, {}} {
		out := m.exec.answerRelease(nil, 1, payload)
		_, kind, body, err := frame.Parse(out[4:])
		if err != nil || kind != frame.KindError || string(body) != frame.ErrMalformed.Error() {
			t.Errorf("payload %v: kind %d %q, want KindError %q", payload, kind, body, frame.ErrMalformed)
		}
	}
}

// TestProofWait checks how long a proof holds a guarded partition: not
// at all once proven (for a merge once released, for anything once
// cleared), until the proven time when that is later, releasePoll while
// a round still asks, the whole guard otherwise, and the whole guard for
// a guard newer than the round (set by a read after it asked) or of a
// partition the round does not ask about (one that moved here).
func TestProofWait(t *testing.T) {
	ms := func(n int64) int64 { return n * int64(time.Millisecond) }
	g, now := ms(1000), ms(100)
	pf := &proof{cover: ms(2000), asking: true, in: []bool{true, true, true, false}, released: []int64{ms(50), ms(300), 0, 0}, cleared: []int64{0, 0, 0, 0}}
	cases := []struct {
		p     uint64
		g     int64
		merge bool
		want  int64
	}{
		{0, g, true, 0},                     // released: a merge passes
		{0, g, false, int64(releasePoll)},   // not cleared: asking
		{1, g, true, ms(200)},               // released from 300 ms
		{2, g, true, int64(releasePoll)},    // unproven, asking
		{0, ms(3000), true, ms(3000) - now}, // a newer guard: not covered
		{1, ms(250), true, ms(150)},         // the guard ends before the proof
	}
	for _, c := range cases {
		if got := pf.wait(c.p, c.g, now, c.merge); got != c.want {
			t.Errorf("partition %d guard %d merge %v: wait %d, want %d", c.p, c.g, c.merge, got, c.want)
		}
	}
	pf.cleared[0], pf.asking = ms(60), false
	if got := pf.wait(0, g, now, false); got != 0 {
		t.Errorf("cleared: wait %d, want 0", got)
	}
	if got := pf.wait(2, g, now, true); got != g-now {
		t.Errorf("unproven, round over: wait %d, want the guard's %d", got, g-now)
	}
	if got := (*proof)(nil).wait(0, g, now, false); got != g-now {
		t.Errorf("no proof: wait %d, want %d", got, g-now)
	}
}

// TestReleaseOverChannel asks a member of a running cluster, over the
// owner channel, for the release proof of every partition: every one
// answers 1 (nothing in flight, nothing left unfinished), those its
// newest read makes it own revoked for HandoverGrace (a key of them
// waits), and the answer names the asker.
func TestReleaseOverChannel(t *testing.T) {
	ms := startCluster(t, 2, nil)
	a, b := ms[0], ms[1]
	parts := make([]uint64, a.cfg.PartitionCount)
	for p := range parts {
		parts[p] = uint64(p)
	}
	var ans released
	deadline := time.Now().Add(10 * time.Second)
	for {
		var hold bool
		var err error
		ans, hold, err = a.peers.askRelease(context.Background(), b.Name(), parts, time.Second)
		if err == nil && !hold {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no answer: hold %v, %v", hold, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for p, st := range ans.state {
		if st != 1 {
			t.Errorf("partition %d (owner %s): state %d, want 1", p, b.routing.current().owners[p], st)
		}
	}
	// b revoked its own partitions for HandoverGrace: a key of b's waits.
	key := ""
	for i := 0; key == ""; i++ {
		if k := "k" + strconv.Itoa(i); b.Owner(k) == b.Name() {
			key = k
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	cfg, _ := core.NewConfig(core.Intervally(10, 10, time.Hour))
	if _, err := b.Execute(ctx, key, availableReq(&cfg)); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a key of the answerer just after the answer: %v, want held past its deadline", err)
	}
	if !slices.Contains(ans.names, a.Name()) {
		t.Errorf("names %v lack the asker %s", ans.names, a.Name())
	}
}
