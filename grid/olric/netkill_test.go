//go:build linux

package olric

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// killRound is one kill of TestNetKillsAfterPause as measured.
type killRound struct {
	window time.Duration // until the killed owner's key answered again
	// patient: how long one check of the key, bounded by 5 s and started
	// at the kill, took on the other survivor
	patient time.Duration
	held    time.Duration // of it, failed attempts held by a hand-over guard
	detect  time.Duration // until the measuring member's gossip declared it dead, -1 if not seen
	stall   time.Duration // the survivors' longest scheduler stall meanwhile
	pause   string        // "" or which member was paused before the kill
	key     string
}

// What TestNetKillsAfterPause can judge. The window starts with gossip's
// failure detection, which this package only configures: with the default
// timings (probe every 100 ms, 50 ms for the ack, suspicion 2 probe
// periods, at most twice that without a confirmation) the measuring
// member's gossip declares the killed member dead within about 0.5 s.
// When it took longer than detectJudged, the machine starved gossip, and
// a window over a second says nothing about the fail-over the package
// does: such a kill is measured again, at most killRetries times a run;
// more than that and the test fails saying it could not judge. A window
// over a second after a timely detection always counts.
const (
	detectJudged = 600 * time.Millisecond
	killRetries  = 4
)

// TestNetKillsAfterPause kills a key's owner (SIGKILL) 30 times, on two
// test beds of 3 hosts at once (15 kills each, to stay within the suite's
// budget), and measures from a third host how long the key stays
// unavailable (each attempt bounded by 100 ms; the killed member restarted
// and the cluster stable again between kills), and from the other survivor
// how long one check of the key bounded by 5 s, started at the kill, takes
// (a patient caller, which a hand-over guard holds for as long as the
// guard says). One kill in three follows a
// pause: a member (the victim itself or the other survivor, in turn) is
// stopped (SIGSTOP) long enough for gossip to declare it dead, resumed, and
// the owner killed a second later, while the views still change (the pause
// cost one later kill 7.2 s in a run on an earlier head). The p99 of both over the 30
// kills (with 30, the worst) must be at most 1 s.
func TestNetKillsAfterPause(t *testing.T) {
	if testing.Short() {
		t.Skip("creates network namespaces and starts processes")
	}
	t.Parallel()
	const beds, killsPerBed = 2, 15
	var mu sync.Mutex
	var rounds []killRound
	t.Run("beds", func(t *testing.T) {
		for b := range beds {
			t.Run(fmt.Sprint("bed", b), func(t *testing.T) {
				t.Parallel()
				got := killsAfterPause(t, killsPerBed)
				mu.Lock()
				rounds = append(rounds, got...)
				mu.Unlock()
			})
		}
	})
	if t.Failed() {
		return
	}
	var all, paused, patient []time.Duration
	for _, r := range rounds {
		all = append(all, r.window)
		patient = append(patient, r.patient)
		if r.pause != "" {
			paused = append(paused, r.window)
		}
	}
	slices.Sort(all)
	slices.Sort(paused)
	slices.Sort(patient)
	p := func(d []time.Duration, q int) time.Duration { return d[(len(d)*q+99)/100-1] }
	t.Logf("%d kills: a killed owner's key unavailable p50 %v, p99 %v; the %d after a pause: %v (sorted); a patient check took p50 %v, p99 %v", len(all), p(all, 50), p(all, 99), len(paused), paused, p(patient, 50), p(patient, 99))
	if len(all) < beds*killsPerBed {
		t.Fatalf("%d kills measured, want %d", len(all), beds*killsPerBed)
	}
	if w := p(all, 99); w > time.Second {
		t.Errorf("p99 of a killed owner's key's window %v over %d kills, want at most 1 s", w, len(all))
	}
	if w := p(patient, 99); w > time.Second {
		t.Errorf("p99 of a patient check of a killed owner's key %v over %d kills, want at most 1 s", w, len(all))
	}
}

// killsAfterPause runs kills rounds on a cluster of its own (see
// TestNetKillsAfterPause) and returns what it measured.
func killsAfterPause(t *testing.T, kills int) []killRound {
	c := startNetCluster(t, 3, netTimings{})
	// The pause outlasts gossip's detection (about 0.5 s with the default
	// 100 ms probes) so that the member is declared dead and comes back;
	// the kill follows while the views change. Both are the scenario's
	// timings, not synchronisation.
	const pauseFor, killAfter = 1200 * time.Millisecond, time.Second
	var out []killRound
	retries := 0
	for r := 0; len(out) < kills; r++ {
		victim := 1 + r%2
		survivor := 3 - victim
		var kr killRound
		if r%3 == 0 {
			paused := victim
			if (r/3)%2 == 1 {
				paused = survivor
			}
			kr.pause = fmt.Sprint("member ", paused)
			if paused == victim {
				kr.pause += " (the victim)"
			}
			if err := c.procs[paused].Stop(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(pauseFor)
			if err := c.procs[paused].Cont(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(killAfter)
		}
		// A key the measuring member routes to the victim, else one the
		// victim's own routing gives it.
		c.kids[0].send(t, fmt.Sprintf("KEYOF %s kill 1000", c.bed.Hosts[victim].Addr))
		kr.key = c.kids[0].expect(t, "KEYOF")
		if kr.key == "-" {
			c.kids[victim].send(t, "OWNKEY kill 1000")
			kr.key = c.kids[victim].expect(t, "OWNKEY")
		}
		if kr.key == "-" {
			t.Fatalf("round %d: member %d owns no key", r, victim)
		}
		for _, i := range []int{0, survivor} {
			c.kids[i].send(t, "STALL")
			c.kids[i].expect(t, "STALL")
		}
		killed := time.Now()
		c.procs[victim].Kill()
		c.procs[victim].Wait()
		c.kids[0].send(t, "OUTAGE "+kr.key)
		c.kids[survivor].send(t, "FAILOVER "+kr.key)
		f := strings.Fields(c.kids[0].expect(t, "OUTAGE"))
		pf := strings.Fields(c.kids[survivor].expect(t, "FAILOVER"))
		pms, _ := strconv.Atoi(pf[0])
		kr.patient = time.Duration(pms) * time.Millisecond
		if pf[1] != "ok" {
			t.Errorf("round %d: the patient check failed: %s", r, pf[1])
		}
		ms, _ := strconv.Atoi(f[0])
		held, _ := strconv.Atoi(f[len(f)-1])
		kr.window, kr.held = time.Duration(ms)*time.Millisecond, time.Duration(held)*time.Millisecond
		for _, i := range []int{0, survivor} {
			c.kids[i].send(t, "STALL")
			us, _ := strconv.Atoi(c.kids[i].expect(t, "STALL"))
			kr.stall = max(kr.stall, time.Duration(us)*time.Microsecond)
		}
		c.kids[0].send(t, "DEADAT")
		ns, _ := strconv.ParseInt(c.kids[0].expect(t, "DEADAT"), 10, 64)
		kr.detect = -1
		if at := time.Unix(0, ns); at.After(killed) {
			kr.detect = at.Sub(killed)
		}
		t.Logf("kill %d of member %d (key %s), after a pause of %q: unavailable %v, %v of it held by a hand-over guard, a patient check took %v; gossip declared it dead after %v; survivors' longest stall %v",
			r, victim, kr.key, kr.pause, kr.window, kr.held, kr.patient, kr.detect.Round(time.Millisecond), kr.stall.Round(time.Millisecond))
		c.restart(t, victim)
		c.wait(t, 3, c.kids...)
		if max(kr.window, kr.patient) > time.Second && kr.detect > detectJudged {
			if retries == killRetries {
				t.Fatalf("could not judge: in %d kills over 1 s gossip took more than %v to declare the member dead (the machine starved it)", retries+1, detectJudged)
			}
			retries++
			t.Logf("kill %d: gossip took %v to declare the member dead: measured again", r, kr.detect.Round(time.Millisecond))
			continue
		}
		out = append(out, kr)
	}
	c.stop(t)
	return out
}
