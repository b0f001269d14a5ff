//go:build linux

package olric

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// tokens asks k for the available tokens of buckets p0 … p(n-1).
func tokens(t *testing.T, k *child, prefix string, n int) []int64 {
	t.Helper()
	k.send(t, fmt.Sprintf("TOKENS %s %d", prefix, n))
	f := strings.Fields(k.expect(t, "TOKENS"))
	out := make([]int64, len(f))
	for i, s := range f {
		out[i], _ = strconv.ParseInt(s, 10, 64)
	}
	return out
}

// consumed is what a CONSUME command reports.
type consumed struct {
	admitted, failed, noQuorum int
	which                      map[int]bool // the buckets that admitted
}

// consumeAll has k take n tokens from each of buckets p0 … p(count-1).
func consumeAll(t *testing.T, k *child, prefix string, count, n int) consumed {
	t.Helper()
	k.send(t, fmt.Sprintf("CONSUME %s %d %d", prefix, count, n))
	f := strings.Fields(k.expect(t, "CONSUME"))
	var c consumed
	c.admitted, _ = strconv.Atoi(f[0])
	c.failed, _ = strconv.Atoi(f[1])
	c.noQuorum, _ = strconv.Atoi(f[2])
	c.which = map[int]bool{}
	for _, w := range strings.Split(f[3], ",") {
		if i, err := strconv.Atoi(w); err == nil {
			c.which[i] = true
		}
	}
	return c
}

// consume has k take n tokens from each of buckets p0 … p(count-1) and
// returns how many checks failed.
func consume(t *testing.T, k *child, prefix string, count, n int) int {
	t.Helper()
	return consumeAll(t, k, prefix, count, n).failed
}

// handovers asks each member how many partitions it guarded after start.
func handovers(t *testing.T, kids []*child) []int {
	t.Helper()
	var out []int
	for _, k := range kids {
		k.send(t, "HANDOVERS")
		n, _ := strconv.Atoi(k.expect(t, "HANDOVERS"))
		out = append(out, n)
	}
	return out
}

// shrinks asks each member how many routing reads lost a member.
func shrinks(t *testing.T, kids []*child) []int {
	t.Helper()
	var out []int
	for _, k := range kids {
		k.send(t, "SHRINKS")
		n, _ := strconv.Atoi(k.expect(t, "SHRINKS"))
		out = append(out, n)
	}
	return out
}

// gossipCounts asks each member how many times its gossip took another
// member for suspect and for dead.
func gossipCounts(t *testing.T, kids []*child) (suspect, dead []int) {
	t.Helper()
	for _, k := range kids {
		k.send(t, "GOSSIP")
		f := strings.Fields(k.expect(t, "GOSSIP"))
		s, _ := strconv.Atoi(f[0])
		d, _ := strconv.Atoi(f[1])
		suspect, dead = append(suspect, s), append(dead, d)
	}
	return suspect, dead
}

// TestNetPartitionHeals cuts one host of three off the network, lets both
// sides consume from the same buckets, and heals the network: the members
// must form one cluster again by themselves, read one routing table, and
// no bucket may end with more tokens than either side left it, nor more
// than the exact bucket holds after what both sides admitted. (A side
// that could not read a bucket started it empty, Config.LostState, and
// admitted nothing from it: it left nothing to merge, and the other
// side's state is the bucket's.)
func TestNetPartitionHeals(t *testing.T) {
	t.Parallel()
	c := startNetCluster(t, 3, netTimings{})
	const n = 60
	if f := consume(t, c.kids[0], "split", n, 10); f > 0 {
		t.Fatalf("%d checks failed before the partition", f)
	}
	c.bed.Partition(c.bed.Hosts[2:])
	c.wait(t, 2, c.kids[:2]...)
	// The cut host should own every bucket too. Olric v0.7.4 on it may
	// not re-route for minutes, though: its routing update pushes the
	// new table to a member across the split first and waits for it.
	// The heal must work either way; say which case this run saw.
	c.kids[2].send(t, "WAIT 1 part 5")
	stuck := false
	if w := c.kids[2].expect(t, "WAIT"); strings.HasPrefix(w, "timeout") {
		stuck = true
		t.Logf("Olric on the cut host did not re-route within 5 s (%s): the cut host answers only its own buckets", w)
	}
	// The majority takes 100 from each bucket, the cut host 300 (where it
	// can).
	maj := consumeAll(t, c.kids[0], "split", n, 100)
	if maj.failed > 0 {
		t.Errorf("%d checks failed on the majority side", maj.failed)
	}
	// Where Olric did not re-route, the cut host's checks of buckets
	// owned across the split wait out their deadline: keep it short.
	cutCmd, tokCmd := fmt.Sprintf("CONSUME split %d 300", n), fmt.Sprintf("TOKENS split %d", n)
	if stuck {
		cutCmd, tokCmd = cutCmd+" 150", tokCmd+" 150"
	}
	c.kids[2].send(t, cutCmd)
	cf := strings.Fields(c.kids[2].expect(t, "CONSUME"))
	failed, _ := strconv.Atoi(cf[1])
	cutWhich := map[int]bool{}
	for _, w := range strings.Split(cf[3], ",") {
		if i, err := strconv.Atoi(w); err == nil {
			cutWhich[i] = true
		}
	}
	c.kids[2].send(t, tokCmd)
	var cutTokens []int64
	for _, s := range strings.Fields(c.kids[2].expect(t, "TOKENS")) {
		v, _ := strconv.ParseInt(s, 10, 64)
		cutTokens = append(cutTokens, v)
	}
	sides := [][]int64{tokens(t, c.kids[0], "split", n), cutTokens}
	if !stuck && failed > 0 {
		t.Errorf("%d checks failed on the cut host", failed)
	}
	t.Logf("the cut host: %d of %d checks failed", failed, n)
	healed := time.Now()
	c.bed.Heal()
	c.wait(t, 3, c.kids...)
	t.Logf("one cluster again %v after the network healed", time.Since(healed).Round(time.Millisecond))
	for _, k := range c.kids {
		got := tokens(t, k, "split", n)
		for i, tk := range got {
			exact := int64(netCapacity - 10)
			limit := int64(netCapacity)
			if maj.which[i] {
				exact -= 100
				limit = min(limit, sides[0][i])
			}
			if cutWhich[i] {
				exact -= 300
				limit = min(limit, sides[1][i])
			}
			if tk > min(limit, exact) || tk < 0 {
				t.Errorf("bucket split%d: %d tokens after the heal, sides left %d and %d, the exact bucket %d", i, tk, sides[0][i], sides[1][i], exact)
			}
		}
	}
	c.stop(t)
}

// TestNetCrashWindow kills the owner of a key (SIGKILL) again and again and
// measures, from another host, how long the key stays unavailable (each
// check attempt bounded by 100 ms), and, every other kill, the longest
// wait between successful checks of a key of the measuring host itself (a
// bystander) from the kill until 1.6 s after the killed owner's key
// answered; the killed member is restarted between rounds. The p99 of both must be under a second. A kill that took longer
// without being held by a hand-over guard (detection slowed by load) is
// measured again, at most four times; one held by the guard never is.
func TestNetCrashWindow(t *testing.T) {
	t.Parallel()
	c := startNetCluster(t, 3, netTimings{})
	var windows, bystander []time.Duration
	kills, again := 8, 0
	for r := 0; r < kills; r++ {
		victim := 1 + r%2
		k := c.kids[victim]
		k.send(t, "OWNKEY crash 1000")
		key := k.expect(t, "OWNKEY")
		c.kids[0].send(t, "OWNKEY crash 1000")
		own := c.kids[0].expect(t, "OWNKEY")
		if key == "-" || own == "-" {
			t.Fatal("a member owns no key")
		}
		c.procs[victim].Kill()
		c.procs[victim].Wait()
		// Every other kill, a key of the measuring host is checked too.
		cmd := "OUTAGE " + key
		if r%2 == 0 {
			cmd += " " + own
		}
		c.kids[0].send(t, cmd)
		f := strings.Fields(c.kids[0].expect(t, "OUTAGE"))
		ms, _ := strconv.Atoi(f[0])
		held, _ := strconv.Atoi(f[len(f)-1])
		bms := -1
		if len(f) == 3 {
			bms, _ = strconv.Atoi(f[1])
		}
		w := time.Duration(ms) * time.Millisecond
		c.restart(t, victim)
		c.wait(t, 3, c.kids...)
		if w > time.Second && held < 500 && again < 4 {
			again++
			kills++
			t.Logf("kill %d: %v, %d ms of it held by a hand-over guard: slowed by load, measured again", r, w, held)
			continue
		}
		windows = append(windows, w)
		if bms >= 0 {
			bystander = append(bystander, time.Duration(bms)*time.Millisecond)
		}
	}
	p99 := func(d []time.Duration) time.Duration { return d[(len(d)*99+99)/100-1] }
	slices.Sort(windows)
	slices.Sort(bystander)
	t.Logf("a killed owner's key was unavailable for %v (sorted, %d kills), a key of the measuring host waited at most %v", windows, len(windows), bystander)
	if w := p99(windows); w > time.Second {
		t.Errorf("p99 of the window %v, want under 1 s", w)
	}
	if w := p99(bystander); w > time.Second {
		t.Errorf("p99 of a bystander key's window %v, want under 1 s", w)
	}
	c.stop(t)
}

// TestNetKillRestart kills a member (SIGKILL) and starts it again on the
// same host at once, before gossip declared the old process dead: the
// others still take the old process's record for alive (the new one
// answers its probes), and ignore the new one's records until it refutes
// the old record with a higher incarnation. It must be let in and the
// cluster read one routing table of three again; before the refutation was
// allowed, the restarted member failed to start within JoinTimeout.
func TestNetKillRestart(t *testing.T) {
	t.Parallel()
	c := startNetCluster(t, 3, netTimings{Replicas: 2})
	for r := range 2 {
		victim := 1 + r
		c.procs[victim].Kill()
		c.procs[victim].Wait()
		start := time.Now()
		c.restart(t, victim)
		up := time.Since(start)
		c.wait(t, 3, c.kids...)
		t.Logf("member %d killed and restarted at once: up after %v, one routing table of 3 after %v", victim, up.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	}
	c.stop(t)
}

// TestNetQuorum is TestNetPartitionHeals with Config.Quorum: the cut host,
// a minority, refuses every check (ErrNoQuorum where it would have been
// the owner) instead of admitting a second capacity, the majority goes on,
// starting the buckets it could not read empty (Config.LostState), and
// after the heal every bucket holds exactly what the exact bucket holds:
// what the majority left where it admitted, the minority's last state
// where the majority admitted nothing.
func TestNetQuorum(t *testing.T) {
	t.Parallel()
	c := startNetCluster(t, 3, netTimings{Quorum: true})
	const n = 60
	if f := consume(t, c.kids[0], "q", n, 10); f > 0 {
		t.Fatalf("%d checks failed before the partition", f)
	}
	c.bed.Partition(c.bed.Hosts[2:])
	c.wait(t, 2, c.kids[:2]...)
	maj := consumeAll(t, c.kids[0], "q", n, 100)
	if maj.failed > 0 {
		t.Errorf("%d checks failed on the majority side", maj.failed)
	}
	t.Logf("the majority: %d of %d admitted (the others' state was on the cut host: they started empty)", maj.admitted, n)
	cut := consumeAll(t, c.kids[2], "q", n, 300)
	t.Logf("the cut host: %d admitted, %d failed (%d with ErrNoQuorum) of %d", cut.admitted, cut.failed, cut.noQuorum, n)
	if cut.admitted > 0 {
		t.Errorf("the cut host admitted %d checks without a quorum", cut.admitted)
	}
	if cut.noQuorum == 0 {
		t.Error("no check failed with ErrNoQuorum on the cut host")
	}
	majority := tokens(t, c.kids[0], "q", n)
	c.bed.Heal()
	c.wait(t, 3, c.kids...)
	for _, k := range c.kids {
		for i, tk := range tokens(t, k, "q", n) {
			exact := int64(netCapacity - 10)
			if maj.which[i] {
				exact -= 100
			}
			if tk != exact || maj.which[i] && tk != majority[i] {
				t.Errorf("bucket q%d: %d tokens after the heal, the exact bucket %d, the majority left %d", i, tk, exact, majority[i])
			}
		}
	}
	c.stop(t)
}

// TestNetNoFalseHandover runs checks on every member while two busy loops
// hold both cores of the machine, and counts the routing reads that lost
// a member and the partitions guarded as hand-overs: with no fault there
// must be none of either (gossip's fast failure detection must not suspect
// a member that is only starved, and a routing read that starvation
// delayed must not guard what did not change). It runs before the other
// test-bed tests, which run two at a time (t.Parallel), and not beside
// them: its busy loops would starve theirs.
func TestNetNoFalseHandover(t *testing.T) {
	c := startNetCluster(t, 3, netTimings{})
	for range 2 {
		c.bed.Start(c.bed.Hosts[0].Command("sh", "-c", "while :; do :; done"))
	}
	const seconds = 6
	before := handovers(t, c.kids)
	for _, k := range c.kids {
		k.send(t, fmt.Sprintf("LOAD busy 100 %d", seconds))
	}
	checks, failed := 0, 0
	for _, k := range c.kids {
		f := strings.Fields(k.expect(t, "LOAD"))
		n, _ := strconv.Atoi(f[0])
		e, _ := strconv.Atoi(f[1])
		checks += n
		failed += e
	}
	got, hand := shrinks(t, c.kids), handovers(t, c.kids)
	for i := range hand {
		hand[i] -= before[i]
	}
	t.Logf("%d checks in %d s beside two busy loops, %d failed; per member, routing reads that lost a member %v, partitions guarded %v", checks, seconds, failed, got, hand)
	for i := range got {
		if got[i] != 0 || hand[i] != 0 {
			t.Errorf("member %d saw a member lost %d times and guarded %d partitions with no fault", i, got[i], hand[i])
		}
	}
	if failed > 0 {
		t.Errorf("%d checks failed with no fault", failed)
	}
	c.stop(t)
}

// TestNetStarvedMember pauses one member (SIGSTOP, SIGCONT) for 700 ms
// three times while every member checks buckets: a stand-in for a process
// the scheduler starves, whose routing reads come late. Unless gossip
// declared a member dead, no routing read may lose a member, no partition
// may be guarded and no check may fail: nothing changed.
//
// Whether gossip declared a death is gossip's own word, counted by every
// member (GOSSIP: memberlist's alive-to-suspect and to-dead transitions).
// The margin, from this test's configuration: gossip probes every 500 ms
// (ProbeTimeout 125 ms, SuspicionMult 2, gossip every 125 ms). A probe of
// the paused member fails at the end of its probe period, 500 ms after it
// was sent, and only then is the member suspected; with 3 members the
// suspicion lasts SuspicionMult × max(1, log10 3) × 500 ms = 1 s
// (memberlist expects no confirmations below SuspicionMult 3), so gossip
// declares the member dead no sooner than 1.5 s after it last answered. A
// pause of 700 ms leaves it 800 ms after SIGCONT (six gossip periods) to
// hear the suspicion and refute it. A probe sent in a pause's first 200 ms
// fails, so gossip may suspect the member (counted and logged): suspicion
// is no membership change and must guard nothing. A death in a round means
// the machine starved the member 800 ms beyond its pause: a real membership
// change, after which hand-overs and failed checks are right, so that round
// cannot judge the claim and runs once more, with the same pauses; a second
// round that cannot judge fails the test.
func TestNetStarvedMember(t *testing.T) {
	t.Parallel()
	c := startNetCluster(t, 3, netTimings{Probe: 500 * time.Millisecond})
	const pause = 700 * time.Millisecond
	for round := 1; ; round++ {
		before, lostBefore := handovers(t, c.kids), shrinks(t, c.kids)
		suspectBefore, deadBefore := gossipCounts(t, c.kids)
		for _, k := range c.kids {
			k.send(t, "LOAD starve 100 4")
		}
		for range 3 {
			time.Sleep(300 * time.Millisecond) // the scenario: checks run between pauses
			if err := c.procs[1].Stop(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(pause) // the fault's length, not a synchronisation
			if err := c.procs[1].Cont(); err != nil {
				t.Fatal(err)
			}
		}
		failed := 0
		for _, k := range c.kids {
			e, _ := strconv.Atoi(strings.Fields(k.expect(t, "LOAD"))[1])
			failed += e
		}
		// Gossip's counts are read last: a hand-over counted above
		// followed a death counted here.
		lost, guarded := shrinks(t, c.kids), handovers(t, c.kids)
		suspect, dead := gossipCounts(t, c.kids)
		for i := range guarded {
			guarded[i] -= before[i]
			lost[i] -= lostBefore[i]
			suspect[i] -= suspectBefore[i]
			dead[i] -= deadBefore[i]
		}
		t.Logf("round %d, member 1 paused 3 × %v: %d checks failed; per member, gossip's suspicions %v and deaths %v, routing reads that lost a member %v, partitions guarded %v",
			round, pause, failed, suspect, dead, lost, guarded)
		if slices.Max(dead) > 0 {
			if round == 2 {
				t.Fatalf("could not judge: in both rounds gossip declared a member dead (%v), which it does no sooner than 1.5 s after member 1 stopped answering, though its pauses lasted %v: the machine starved it", dead, pause)
			}
			t.Logf("gossip declared a member dead: this round cannot judge; once more on a cluster whole again")
			c.wait(t, 3, c.kids...)
			continue
		}
		if slices.Max(lost) > 0 {
			t.Errorf("routing reads lost a member %v times, and gossip declared none dead", lost)
		}
		if slices.Max(guarded) > 0 {
			t.Errorf("partitions guarded with no membership change: %v", guarded)
		}
		if failed > 0 {
			t.Errorf("%d checks failed with no membership change", failed)
		}
		break
	}
	c.stop(t)
}

// TestNetSlowLinks routes every member's traffic to the others (the owner
// channel, and Olric's traffic through it) through proxies that delay each
// direction by 5 ms, then 25 ms, then 50 ms, and times checks of a key
// owned by another host: the p99 must stay within one round trip plus a
// margin (25 ms; measured again with 100 ms where the first try misses,
// as a loaded machine may), and no member may lose another or guard a
// partition.
func TestNetSlowLinks(t *testing.T) {
	t.Parallel()
	c := startNetCluster(t, 3, netTimings{Delay: 5 * time.Millisecond})
	c.kids[1].send(t, "OWNKEY slow 1000")
	key := c.kids[1].expect(t, "OWNKEY")
	before := handovers(t, c.kids)
	for _, d := range []time.Duration{5 * time.Millisecond, 25 * time.Millisecond, 50 * time.Millisecond} {
		for _, p := range c.proxies {
			p.SetDelay(d)
		}
		for _, margin := range []time.Duration{25 * time.Millisecond, 100 * time.Millisecond} {
			n := int(2 * time.Second / (2*d + margin))
			c.kids[0].send(t, fmt.Sprintf("LATENCY %s %d", key, n))
			f := strings.Fields(c.kids[0].expect(t, "LATENCY"))
			p50, _ := strconv.Atoi(f[0])
			p99, _ := strconv.Atoi(f[1])
			failed, _ := strconv.Atoi(f[2])
			rtt := 2 * d
			t.Logf("one-way delay %v: %d checks of a remote key, p50 %v, p99 %v, %d failed", d, n,
				time.Duration(p50)*time.Microsecond, time.Duration(p99)*time.Microsecond, failed)
			if failed > 0 {
				t.Errorf("%d checks failed with a one-way delay of %v", failed, d)
			}
			if time.Duration(p99)*time.Microsecond <= rtt+margin {
				break
			}
			if margin == 100*time.Millisecond {
				t.Errorf("p99 %v with a round trip of %v, want under %v", time.Duration(p99)*time.Microsecond, rtt, rtt+margin)
			}
		}
	}
	lost, hand := shrinks(t, c.kids), handovers(t, c.kids)
	for i := range hand {
		if hand[i] -= before[i]; lost[i] != 0 || hand[i] != 0 {
			t.Errorf("member %d lost a member %d times and guarded %d partitions on slow links", i, lost[i], hand[i])
		}
	}
	c.stop(t)
}

// hammered is what a HAMMER command reports.
type hammered struct {
	admitted, failed int64
	first, last      time.Time
	gap              time.Duration
}

func hammerResult(t *testing.T, k *child) hammered {
	t.Helper()
	f := strings.Fields(k.expect(t, "HAMMER"))
	var h hammered
	var first, last, gap int64
	h.admitted, _ = strconv.ParseInt(f[0], 10, 64)
	h.failed, _ = strconv.ParseInt(f[1], 10, 64)
	first, _ = strconv.ParseInt(f[2], 10, 64)
	last, _ = strconv.ParseInt(f[3], 10, 64)
	gap, _ = strconv.ParseInt(f[4], 10, 64)
	h.first, h.last, h.gap = time.Unix(0, first), time.Unix(0, last), time.Duration(gap)*time.Millisecond
	return h
}

// TestNetPausedOwner pauses a key's owner (SIGSTOP) for 10 s while two
// other hosts draw from the key's bucket (which refills), then resumes it.
// The others take the key over while it sleeps; whatever the paused owner
// still held (requests read before the pause, a routing read, an execution
// half done) must not be applied or admitted when it wakes: its routing
// lease ran out, so it holds until it has read the new routing. Nothing is
// admitted beyond what the bucket allowed over the whole run.
func TestNetPausedOwner(t *testing.T) {
	t.Parallel()
	c := startNetCluster(t, 3, netTimings{Replicas: 2})
	c.kids[1].send(t, "OWNKEY pause 1000")
	key := c.kids[1].expect(t, "OWNKEY")
	const seconds = 14
	for _, i := range []int{0, 2} {
		c.kids[i].send(t, fmt.Sprintf("HAMMER %s %d", key, seconds))
	}
	time.Sleep(2 * time.Second) // the scenario: load first, then the pause
	if err := c.procs[1].Stop(); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	time.Sleep(10 * time.Second)
	if err := c.procs[1].Cont(); err != nil {
		t.Fatal(err)
	}
	t.Logf("owner paused for %v", time.Since(paused).Round(time.Millisecond))
	var total hammered
	for _, i := range []int{0, 2} {
		h := hammerResult(t, c.kids[i])
		total.admitted += h.admitted
		total.failed += h.failed
		total.gap = max(total.gap, h.gap)
		if total.first.IsZero() || h.first.Before(total.first) {
			total.first = h.first
		}
		if h.last.After(total.last) {
			total.last = h.last
		}
	}
	c.wait(t, 3, c.kids...)
	elapsed := total.last.Sub(total.first)
	allowed := hammerCapacity + int64(hammerRate*elapsed.Seconds()) + 1
	t.Logf("paused owner: %d admitted of %d allowed in %v, %d checks failed, longest gap between successful checks %v",
		total.admitted, allowed, elapsed.Round(time.Millisecond), total.failed, total.gap)
	if total.admitted > allowed {
		t.Errorf("over-admission: %d admitted, the bucket allowed %d", total.admitted, allowed)
	}
	c.stop(t)
}

// TestNetRollingRestart restarts every member in turn (Shutdown, then a new
// process on the same host) with two replicas while the other two draw
// 50 buckets dry, the next once every member reads one routing table and
// reports Replicated (netCluster.wait): no bucket may lose what was
// consumed from it, and none may admit more than its capacity.
func TestNetRollingRestart(t *testing.T) {
	t.Parallel()
	c := startNetCluster(t, 3, netTimings{Replicas: 2})
	const n = 50
	admitted := make([]int64, n)
	failed := 0
	var steps [][]string // what each member saw of every bucket after each step
	for i := range c.kids {
		var others []*child
		for j, k := range c.kids {
			if j != i {
				others = append(others, k)
				k.send(t, fmt.Sprintf("LOAD roll %d 5", n))
			}
		}
		c.kids[i].send(t, "STOP")
		c.procs[i].Wait()
		c.restart(t, i)
		for _, k := range others {
			f := strings.Fields(k.expect(t, "LOAD"))
			e, _ := strconv.Atoi(f[1])
			failed += e
			for b := range n {
				a, _ := strconv.ParseInt(f[3+b], 10, 64)
				admitted[b] += a
			}
		}
		c.wait(t, 3, c.kids...)
		steps = append(steps, rollDiag(t, c.kids, "roll", rangeN(n)))
	}
	lost, over := 0, 0
	var overTokens int64
	var lostOnes []int
	left := tokens(t, c.kids[0], "roll", n)
	for b, tk := range left {
		if tk > netCapacity-admitted[b] {
			lost++
			lostOnes = append(lostOnes, b)
		}
		if admitted[b] > netCapacity {
			over++
			overTokens += admitted[b] - netCapacity
		}
	}
	t.Logf("rolling restart of 3 members: %d checks failed; %d of %d buckets lost consumption, %d over-admitted (%d tokens)", failed, lost, n, over, overTokens)
	if lost > 0 || over > 0 {
		t.Errorf("%d buckets lost, %d over-admitted", lost, over)
		logLost(t, c.kids, "roll", lostOnes, left, admitted, steps)
	}
	c.stop(t)
}

// TestNetRollingRestartIdle is TestNetRollingRestart with nobody checking
// the buckets while the members restart (a window used up, its clients
// gone quiet): 50 buckets are drawn down to 400 tokens first, then every
// member is restarted in turn, each once the grid reads one stable routing
// table of 3 members again and every member reports Replicated. No bucket
// may hold more than 400 tokens after.
func TestNetRollingRestartIdle(t *testing.T) {
	t.Parallel()
	c := startNetCluster(t, 3, netTimings{Replicas: 2})
	const n, spent = 50, 600
	// Each check bounded by 15 s: what this judges is the restarts, and a
	// loaded machine once failed one of these within the default 2 s.
	c.kids[0].send(t, fmt.Sprintf("CONSUME idle %d %d 15000", n, spent))
	if got := strings.Fields(c.kids[0].expect(t, "CONSUME")); got[0] != strconv.Itoa(n) {
		t.Fatalf("%s of %d buckets admitted %d tokens", got[0], n, spent)
	}
	admitted := make([]int64, n)
	for b := range admitted {
		admitted[b] = spent
	}
	var steps [][]string
	for i := range c.kids {
		c.kids[i].send(t, "STOP")
		c.procs[i].Wait()
		c.restart(t, i)
		c.wait(t, 3, c.kids...)
		steps = append(steps, rollDiag(t, c.kids, "idle", rangeN(n)))
	}
	left := tokens(t, c.kids[0], "idle", n)
	var lostOnes []int
	for b, tk := range left {
		if tk > netCapacity-spent || tk < 0 {
			lostOnes = append(lostOnes, b)
		}
	}
	t.Logf("idle rolling restart of 3 members: %d of %d buckets lost consumption", len(lostOnes), n)
	if len(lostOnes) > 0 {
		t.Errorf("%d of %d buckets lost consumption (or failed)", len(lostOnes), n)
		logLost(t, c.kids, "idle", lostOnes, left, admitted, steps)
	}
	c.stop(t)
}

// TestNetRollingRestartReady is TestNetRollingRestartIdle restarted the
// way a Kubernetes StatefulSet's rolling update does: the next member is
// stopped as soon as the restarted one is up (Start returned: it serves,
// its readiness probe passes), with no wait for Replicated on the others.
// Only the member being stopped can then keep a bucket's last copy from
// leaving with it: its Shutdown waits until every member reports
// Replicated (waitReplicated). No bucket may hold more than it had left
// after, and no Shutdown may report leaving early (ErrUnreplicated) within
// the 20 s the test's members give it.
func TestNetRollingRestartReady(t *testing.T) {
	t.Parallel()
	c := startNetCluster(t, 3, netTimings{Replicas: 2})
	const n, spent = 50, 600
	c.kids[0].send(t, fmt.Sprintf("CONSUME ready %d %d 15000", n, spent))
	if got := strings.Fields(c.kids[0].expect(t, "CONSUME")); got[0] != strconv.Itoa(n) {
		t.Fatalf("%s of %d buckets admitted %d tokens", got[0], n, spent)
	}
	early := 0
	var stops []string
	for i := range c.kids {
		begin := time.Now()
		c.kids[i].send(t, "STOP")
		for c.kids[i].out.Scan() { // to the old process's end
			if line := c.kids[i].out.Text(); strings.HasPrefix(line, "ERROR") {
				t.Logf("member %d's Shutdown: %s", i, line)
				early++
			}
		}
		c.procs[i].Wait()
		stops = append(stops, time.Since(begin).Round(time.Millisecond).String())
		c.restart(t, i)
	}
	t.Logf("each member's Shutdown took %s", strings.Join(stops, ", "))
	c.wait(t, 3, c.kids...)
	left := tokens(t, c.kids[0], "ready", n)
	var lostOnes []int
	for b, tk := range left {
		if tk > netCapacity-spent || tk < 0 {
			lostOnes = append(lostOnes, b)
		}
	}
	t.Logf("rolling restart of 3 members as a StatefulSet does it: %d of %d buckets lost consumption, %d Shutdowns left early", len(lostOnes), n, early)
	if len(lostOnes) > 0 {
		admitted := make([]int64, n)
		for b := range admitted {
			admitted[b] = spent
		}
		t.Errorf("%d of %d buckets lost consumption (or failed)", len(lostOnes), n)
		some := lostOnes[:min(len(lostOnes), 3)]
		logLost(t, c.kids, "ready", some, left, admitted, nil)
	}
	if early > 0 {
		t.Errorf("%d of 3 Shutdowns left before every bucket had a copy on another member", early)
	}
	c.stop(t)
}

// rangeN returns 0 … n-1.
func rangeN(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// rollDiag asks each of kids what it sees of buckets prefix+i, i in idx
// (see diag): one line per member.
func rollDiag(t *testing.T, kids []*child, prefix string, idx []int) []string {
	t.Helper()
	var s []string
	for _, i := range idx {
		s = append(s, strconv.Itoa(i))
	}
	var out []string
	for _, k := range kids {
		k.send(t, fmt.Sprintf("DIAG %s %s", prefix, strings.Join(s, ",")))
		out = append(out, k.expect(t, "DIAG"))
	}
	return out
}

// logLost logs why the buckets lost (prefix+i, i in lost) lost their
// consumption: their tokens and admissions, what each member saw of each
// after every restart step (steps, each member's rollDiag line of every
// bucket), and what every member sees of each now.
func logLost(t *testing.T, kids []*child, prefix string, lost []int, left, admitted []int64, steps [][]string) {
	t.Helper()
	for _, b := range lost {
		key := prefix + strconv.Itoa(b)
		t.Logf("%s: %d tokens left, %d admitted", key, left[b], admitted[b])
		for s, lines := range steps {
			for _, line := range lines {
				member := strings.Fields(line)[0]
				for e := range strings.SplitSeq(strings.TrimPrefix(line, member+" "), ";") {
					if strings.HasPrefix(e, key+"=") {
						t.Logf("  after restarting member %d, %s sees %s", s, member, e)
					}
				}
			}
		}
	}
	for _, line := range rollDiag(t, kids, prefix, lost) {
		t.Logf("now: %s", line)
	}
}
