//go:build linux && netopen

// Built only with -tags netopen: TestNetResumeKeepsKeys fails on the
// current code (the goal: after SIGCONT, at most 100 ms of failures),
// and stays out of the suite until that is fixed.

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
// included.
func TestNetResumeKeepsKeys(t *testing.T) {
	t.Parallel()
	c := startNetCluster(t, 3, netTimings{})
	before := handovers(t, c.kids)
	for _, i := range []int{0, 2} {
		c.kids[i].send(t, "WATCH resume 60 6")
	}
	time.Sleep(time.Second) // the scenario: checks first, then the pause
	if err := c.procs[1].Stop(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	if err := c.procs[1].Cont(); err != nil {
		t.Fatal(err)
	}
	var f [3][]string
	for _, i := range []int{0, 2} {
		f[i] = strings.Fields(c.kids[i].expect(t, "WATCH"))
	}
	guarded := handovers(t, c.kids)
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
	c.stop(t)
}
