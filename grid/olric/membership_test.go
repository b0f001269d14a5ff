// The membership tests: members join, leave and crash under load. They run
// with the race detector too (scripts/test's race pass). Olric v0.7.4 can
// race with memberlist v0.5 there: Discovery.GetMembers reads the node
// records memberlist.Members returned after memberlist released its lock,
// while aliveNode rewrites a record's Meta. scripts/racecheck.go names that
// race, and only that one (with Olric's shutdown race), as upstream's.
//
//	go test -race -run 'TestJoinUnderLoad|TestGracefulLeave|TestCrash|TestRollingRestartIdle' ./grid/olric

package olric

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/core/wire"
)

// callTimeout bounds each call of the load. A call that runs out of it
// admitted nothing, which cannot hide an over-admission, so it is counted
// and logged rather than failed: on a loaded machine under the race
// detector a hand-over can hold a key longer (measured: 9 of 5,908 calls
// at load 27). Every other error fails the test.
const callTimeout = 10 * time.Second

// load runs TryConsume(1) on a set of keys from several members until
// stopped, counting what each key admitted and timing each call.
type load struct {
	keys     []string
	admitted []atomic.Int64
	calls    atomic.Int64
	timeouts atomic.Int64 // calls that ran out of their callTimeout
	stopCh   chan struct{}
	wg       sync.WaitGroup
	mu       sync.Mutex
	errs     []error
	lat      []time.Duration // of successful calls, since the last take
}

func startLoad(t *testing.T, callers []*Member, keys []string, cfg *core.Config, goroutines int) *load {
	return startLoadOf(t, callers, keys, consumeReq(cfg, 1), goroutines)
}

// startLoadOf is startLoad with another request than TryConsume(1).
func startLoadOf(t *testing.T, callers []*Member, keys []string, req wire.Request, goroutines int) *load {
	l := &load{keys: keys, admitted: make([]atomic.Int64, len(keys)), stopCh: make(chan struct{})}
	for g := range goroutines {
		m := callers[g%len(callers)]
		l.wg.Go(func() {
			for i := g; ; i++ {
				select {
				case <-l.stopCh:
					return
				default:
				}
				k := i % len(keys)
				ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
				t0 := time.Now()
				resp, err := m.Execute(ctx, keys[k], req)
				d := time.Since(t0)
				cancel()
				l.calls.Add(1)
				l.mu.Lock()
				switch {
				case errors.Is(err, context.DeadlineExceeded):
					l.timeouts.Add(1)
				case err != nil:
					l.errs = append(l.errs, err)
				default:
					l.lat = append(l.lat, d)
				}
				l.mu.Unlock()
				if err != nil {
					continue
				}
				if resp.Results[0].OK {
					l.admitted[k].Add(1)
				}
			}
		})
	}
	return l
}

// waitCalls blocks until the load has made n more calls. It fails only on
// a stall, no call ending for a minute, and not on a slow pace: under the
// race detector on a loaded machine the calls take many times longer.
func (l *load) waitCalls(t *testing.T, n int64) {
	t.Helper()
	target := l.calls.Load() + n
	last, deadline := l.calls.Load(), time.Now().Add(time.Minute)
	for {
		c := l.calls.Load()
		if c >= target {
			return
		}
		if c != last {
			last, deadline = c, time.Now().Add(time.Minute)
		} else if time.Now().After(deadline) {
			t.Fatalf("load stalled at %d calls (%d wanted)", c, target)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// take returns the median and 99th percentile latency of the calls that
// succeeded since the last take, and their number.
func (l *load) take() (p50, p99 time.Duration, n int) {
	l.mu.Lock()
	lat := l.lat
	l.lat = nil
	l.mu.Unlock()
	if len(lat) == 0 {
		return 0, 0, 0
	}
	slices.Sort(lat)
	return lat[len(lat)/2], lat[len(lat)*99/100], len(lat)
}

func (l *load) stop(t *testing.T) {
	t.Helper()
	close(l.stopCh)
	l.wg.Wait()
	for _, err := range l.errs {
		t.Errorf("load: %v", err)
	}
	switch n := l.timeouts.Load(); {
	case n == l.calls.Load():
		t.Fatalf("load: every one of %d calls ran out of its %v", n, callTimeout)
	case n > 0:
		t.Logf("load: %d of %d calls ran out of their %v (admitting nothing)", n, l.calls.Load(), callTimeout)
	}
}

// overAdmitted returns the tokens admitted beyond capacity, summed over
// keys, and the number of keys that admitted more than capacity.
func (l *load) overAdmitted(capacity int64) (tokens int64, keys int) {
	for k := range l.keys {
		if d := l.admitted[k].Load() - capacity; d > 0 {
			tokens += d
			keys++
		}
	}
	return
}

// TestJoinUnderLoad adds a member to a 2-member cluster while 8 goroutines
// drain 300 buckets of capacity 40, and checks that no bucket admitted more
// than its capacity: the new owner holds each partition it takes over until
// the old owner's routing lease has run out, and then reads the state the
// old owner wrote (Olric merges previous owners' copies on read).
func TestJoinUnderLoad(t *testing.T) {
	const capacity = 40
	ms := startCluster(t, 2, nil)
	cfg, _ := core.NewConfig(core.Intervally(capacity, capacity, time.Hour))
	l := startLoad(t, ms, keySet("join-", 300), &cfg, 8)
	l.waitCalls(t, 2000)

	c := testConfig(t)
	c.Peers = []string{memberlistAddr(ms[0].cfg)}
	joined, err := Start(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	all := append(ms, joined)
	t.Cleanup(func() { shutdownAll(t, []*Member{joined}) })
	waitStable(t, all)
	moved := 0
	for _, k := range l.keys {
		if joined.Owner(k) == joined.Name() {
			moved++
		}
	}
	l.waitCalls(t, 3000)
	l.stop(t)
	over, keys := l.overAdmitted(capacity)
	t.Logf("join: %d calls, %d of %d keys moved to the new member, over-admission %d tokens on %d keys",
		l.calls.Load(), moved, len(l.keys), over, keys)
	if moved == 0 {
		t.Fatal("no key moved: the test proves nothing")
	}
	// The documented bound for a membership change: at most one capacity
	// per moved key (a bucket whose state is lost starts full again).
	if over > int64(moved)*capacity {
		t.Fatalf("over-admission %d exceeds the bound %d", over, moved*capacity)
	}
	if over != 0 {
		t.Errorf("over-admission %d on a join; measured 0 so far", over)
	}
}

// restartCapacity and restartSpent are the buckets of the in-process
// rolling restarts: drawnForRestart draws each to restartCapacity -
// restartSpent tokens.
const restartCapacity, restartSpent = 1000, 600

// restartShutdownTimeout is what the rolling restarts give each Shutdown:
// what cmd/bucketgrid gives its grid member's (backendCloseTimeout), of
// which Shutdown may spend all but LeaveTimeout + 1 s waiting for copies.
// Start has a context of its own, bounded by JoinTimeout: one shared
// context left Start only what Shutdown's wait did not use.
const restartShutdownTimeout = 30 * time.Second

// drawnForRestart starts three members with two replicas and draws 50
// buckets (keys with prefix, configuration cfg) down by restartSpent,
// spread over the members, for a rolling restart to keep.
func drawnForRestart(t *testing.T, prefix string) (ms []*Member, cfg core.Config, keys []string) {
	t.Helper()
	ms = startCluster(t, 3, func(c *Config) { c.ReplicaCount = 2 })
	cfg, _ = core.NewConfig(core.Intervally(restartCapacity, restartCapacity, time.Hour))
	keys = keySet(prefix, 50)
	for i, k := range keys {
		resp, err := ms[i%3].Execute(context.Background(), k, consumeReq(&cfg, restartSpent))
		if err != nil || !resp.Results[0].OK {
			t.Fatalf("%s: %v %+v", k, err, resp)
		}
	}
	return ms, cfg, keys
}

// assertIdleKept checks, through members ms, that no bucket of keys
// (configuration cfg, drawn before a rolling restart and idle since) holds
// more than left tokens: one that does lost consumption in the restart.
// It logs where each such bucket's partition is.
func assertIdleKept(t *testing.T, ms []*Member, keys []string, cfg *core.Config, left int64) {
	t.Helper()
	lost := 0
	for i, k := range keys {
		resp, err := ms[i%len(ms)].Execute(context.Background(), k, availableReq(cfg))
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.Results[0].Tokens; got > left {
			lost++
			r, p := ms[0].routing.current(), ms[0].Partition(k)
			t.Logf("%s: %d tokens; p%d owner %s holders [%s] lostAt %d", k, got, p, r.owners[p], r.holders[p], r.lostAt[p])
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d idle buckets lost consumption in a rolling restart", lost, len(keys))
	}
}

// TestRollingRestartIdle restarts each of three members in turn (Shutdown,
// then Start on the same address) with two replicas, after 50 buckets were
// drawn to 400 of 1,000 tokens and while nobody checks them, each restart
// once every member reads one routing table and reports Replicated: no
// bucket may hold more than 400 tokens after. In one process, so that the
// race pass runs the re-replication (TestNetRollingRestartIdle is the same
// on the test bed).
func TestRollingRestartIdle(t *testing.T) {
	ms, cfg, keys := drawnForRestart(t, "rollidle-")
	for i := range ms {
		c := ms[i].cfg
		c.Peers = []string{memberlistAddr(ms[(i+1)%len(ms)].cfg)}
		ctx, cancel := context.WithTimeout(context.Background(), restartShutdownTimeout)
		err := ms[i].Shutdown(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		m, err := Start(context.Background(), c) // bounded by JoinTimeout
		if err != nil {
			t.Fatal(err)
		}
		ms[i] = m
		begin := time.Now()
		waitStable(t, ms)
		stable := time.Now()
		waitReplicated(t, ms)
		t.Logf("restart %d: routing stable %v after Start, every member Replicated %v later", i,
			stable.Sub(begin).Round(time.Millisecond), time.Since(stable).Round(time.Millisecond))
	}
	assertIdleKept(t, ms, keys, &cfg, restartCapacity-restartSpent)
}

// waitReplicated polls until every member of ms reports Replicated.
func waitReplicated(t *testing.T, ms []*Member) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if !slices.ContainsFunc(ms, func(m *Member) bool { return !m.Replicated() }) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("members did not re-replicate within 60 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestGracefulLeave stops one of three members while 6 goroutines on the
// other two drain 100 buckets of capacity 40. With two replicas nothing is
// lost and nothing over-admitted; with one, exactly the leaver's buckets
// start over empty (Config.LostState), none full, and no other bucket is
// touched.
func TestGracefulLeave(t *testing.T) {
	for _, rf := range []int{1, 2} {
		t.Run(fmt.Sprintf("replicas=%d", rf), func(t *testing.T) {
			const capacity = 40
			ms := startCluster(t, 3, func(c *Config) { c.ReplicaCount = rf })
			cfg, _ := core.NewConfig(core.Intervally(capacity, capacity, time.Hour))
			keys := keySet(fmt.Sprintf("leave%d-", rf), 300)
			// Consume 10 from every bucket first, so that a lost state is
			// visible as 40 available instead of 30.
			for i, k := range keys {
				req := consumeReq(&cfg, 10)
				if _, err := ms[i%3].Execute(context.Background(), k, req); err != nil {
					t.Fatal(err)
				}
			}
			leaver := ms[2]
			owned := map[string]bool{}
			for _, k := range keys {
				owned[k] = leaver.Owner(k) == leaver.Name()
			}
			// The load uses fresh keys so as not to disturb the check above,
			// and drains them (100 keys x 40) before the leave, so that a
			// bucket that starts over shows as over-admission.
			lk := keySet(fmt.Sprintf("leaveload%d-", rf), 100)
			l := startLoad(t, ms[:2], lk, &cfg, 6)
			l.waitCalls(t, 6000)
			leaverOwned := map[string]bool{}
			for _, k := range lk {
				leaverOwned[k] = leaver.Owner(k) == leaver.Name()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			start := time.Now()
			if err := leaver.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			cancel()
			left := time.Since(start)
			waitStable(t, ms[:2])
			l.waitCalls(t, 3000)
			l.stop(t)

			lost, lostElsewhere, fullAgain := 0, 0, 0
			for i, k := range keys {
				resp, err := ms[i%2].Execute(context.Background(), k, availableReq(&cfg))
				if err != nil {
					t.Fatal(err)
				}
				switch got := resp.Results[0].Tokens; {
				case got == capacity-10:
				case got == capacity:
					fullAgain++
					for _, m := range ms[:2] {
						r, p := m.routing.current(), m.Partition(k)
						t.Logf("%s full: %s sees p%d owner %s history [%s] holders [%s] lostAt %d", k, m.Name(), p, r.owners[p], r.history[p], r.holders[p], r.lostAt[p])
					}
				case got == 0:
					lost++
					if !owned[k] {
						lostElsewhere++
					}
				default:
					t.Fatalf("%s: %d available, want %d (kept) or 0 (lost, started empty)", k, got, capacity-10)
				}
			}
			over, overKeys := l.overAdmitted(capacity)
			t.Logf("replicas=%d: shutdown took %v; %d of %d buckets lost (%d owned by the leaver), %d of the leaver's started full; under load over-admission %d tokens on %d keys",
				rf, left.Round(time.Millisecond), lost, len(keys), countTrue(owned), fullAgain, over, overKeys)
			if lostElsewhere > 0 {
				t.Errorf("%d buckets not owned by the leaver were lost", lostElsewhere)
			}
			if fullAgain > 0 {
				t.Errorf("%d buckets started again full (a second capacity each), want 0", fullAgain)
			}
			switch rf {
			case 1:
				if lost != countTrue(owned) {
					t.Errorf("%d buckets lost, want the leaver's %d", lost, countTrue(owned))
				}
				for i, k := range lk {
					if d := l.admitted[i].Load() - capacity; d > 0 {
						t.Errorf("%s over-admitted %d (owned by the leaver: %v); a lost bucket starts empty", k, d, leaverOwned[k])
					}
				}
			case 2:
				if lost != 0 {
					t.Errorf("%d buckets lost with two replicas", lost)
				}
				// While the partitions move, a new owner may read before
				// Olric promotes the backup copy (seen once, under the race
				// detector: 19 tokens on 1 of 100 keys); the bound is the
				// same as with one replica, and it is usually 0.
				for i, k := range lk {
					if d := l.admitted[i].Load() - capacity; d > 0 && (!leaverOwned[k] || d > capacity) {
						t.Errorf("%s over-admitted %d (owned by the leaver: %v)", k, d, leaverOwned[k])
					}
				}
			}
		})
	}
}

// diagHeld parses a DIAG answer into, per partition ("p17"), how many
// entries that member held of it (primary and backup fragments).
func diagHeld(d string) map[string]int {
	out := map[string]int{}
	for _, e := range strings.Split(d, ";") {
		_, rest, _ := strings.Cut(e, "=")
		p, _, _ := strings.Cut(rest, " ")
		n := 0
		for _, f := range strings.Fields(rest) {
			for _, pre := range []string{"primaryLen=", "backupLen="} {
				if v, ok := strings.CutPrefix(f, pre); ok {
					x, _ := strconv.Atoi(v)
					n += x
				}
			}
		}
		out[p] = n
	}
	return out
}

// diagOf returns what each of kids sees of keys (see diag), for a failure.
func diagOf(t *testing.T, kids []*child, keys []string) string {
	t.Helper()
	var b strings.Builder
	for i, k := range kids {
		k.send(t, "DIAG "+strings.Join(keys, ","))
		fmt.Fprintf(&b, "\nmember %d: %s", i, k.expect(t, "DIAG"))
	}
	return b.String()
}

func countTrue(m map[string]bool) int {
	n := 0
	for _, v := range m {
		if v {
			n++
		}
	}
	return n
}

// TestCrash kills one of three member processes (SIGKILL: no leave, no
// hand-over) after 300 buckets were drawn down, and checks what the
// contract says: exactly the buckets whose data died with the member (no
// survivor held an entry of their partition right after the kill) start
// over empty (Config.LostState; before it, full: a second capacity each),
// none a survivor held does (an under-admission), with two replicas none
// is lost, and none starts full. What the member owned when asked is
// logged beside: on a starved machine its partitions move between the
// question and the kill.
func TestCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	const n = 300
	for _, rf := range []int{1, 2} {
		t.Run(fmt.Sprintf("replicas=%d", rf), func(t *testing.T) {
			kids := startChildren(t, 3, rf, "test")
			// Every member routes for three, with no hand-over under way,
			// before the buckets are written and the victim says what it
			// owns: a loaded run (-race, load 9) asked too early, the victim
			// owned nothing yet, and the 105 buckets it took over after
			// the seed counted as a loss the test had not predicted.
			for _, k := range kids {
				k.send(t, "WAIT 3")
				k.expect(t, "STABLE")
			}
			kids[0].send(t, fmt.Sprint("SEED ", n))
			kids[0].expect(t, "SEEDED")
			kids[2].send(t, fmt.Sprint("OWNED ", n))
			owned, _ := strconv.Atoi(kids[2].expect(t, "OWNED"))
			all := make([]string, n)
			for i := range all {
				all[i] = fmt.Sprint("crash-", i)
			}
			// What each member saw of every bucket's partition before the
			// kill, logged for the buckets that come back full.
			var before [3][]string
			for i, k := range kids {
				k.send(t, "DIAG "+strings.Join(all, ","))
				before[i] = strings.Split(k.expect(t, "DIAG"), ";")
			}
			if err := kids[2].cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			kids[0].send(t, "WAIT 2")
			kids[0].expect(t, "STABLE")
			settled := time.Since(start)
			// What the survivors hold of each bucket's partition now,
			// before LOST writes the absent buckets: the truth the
			// verdict is judged against. Under churn (a starved machine:
			// gossip declares a living member dead, partitions move and
			// move back) the victim's ownership when it was asked is not
			// what died with it: a partition it had handed on may still
			// have had its data only on it, one it had taken over may
			// still have had its data on a survivor. A dead member's data
			// never moves again, and a move between the survivors copies
			// before it deletes; reading member 0, member 1, then member
			// 0 again sees every bucket a survivor holds, unless it moved
			// twice in between.
			var held []map[string]int
			for _, i := range []int{0, 1, 0} {
				kids[i].send(t, "DIAG "+strings.Join(all, ","))
				held = append(held, diagHeld(kids[i].expect(t, "DIAG")))
			}
			kids[0].send(t, fmt.Sprint("LOST ", n))
			f := strings.Fields(kids[0].expect(t, "LOST"))
			full, _ := strconv.Atoi(f[0])
			empty, _ := strconv.Atoi(f[1])
			if f[2] != "-" {
				for i, k := range kids[:2] {
					k.send(t, "DIAG "+f[2])
					t.Logf("member %d after: %s", i, k.expect(t, "DIAG"))
				}
				for _, key := range strings.Split(f[2], ",") {
					i, _ := strconv.Atoi(strings.TrimPrefix(key, "crash-"))
					for j := range kids {
						t.Logf("member %d before: %s", j, before[j][i])
					}
				}
			}
			// A bucket is lost (must start empty) when no survivor held
			// an entry of its partition, kept when the survivors held as
			// many entries of its partition as it has buckets, and either
			// when they held some (a partition of several buckets).
			perPart := map[string]int{}
			partOf := map[string]string{}
			for _, d := range before[0] {
				key, rest, _ := strings.Cut(d, "=")
				p, _, _ := strings.Cut(rest, " ")
				partOf[key] = p
				perPart[p]++
			}
			lostKeys, keptKeys, unsure := map[string]bool{}, map[string]bool{}, 0
			for _, key := range all {
				h := 0
				for _, m := range held {
					h = max(h, m[partOf[key]])
				}
				switch {
				case h == 0:
					lostKeys[key] = true
				case h >= perPart[partOf[key]]:
					keptKeys[key] = true
				default:
					unsure++
				}
			}
			emptyKeys := map[string]bool{}
			if f[3] != "-" {
				for _, key := range strings.Split(f[3], ",") {
					emptyKeys[key] = true
				}
			}
			var emptyHeld, lostNotEmpty []string
			for _, key := range all {
				switch {
				case emptyKeys[key] && keptKeys[key]:
					emptyHeld = append(emptyHeld, key)
				case lostKeys[key] && !emptyKeys[key]:
					lostNotEmpty = append(lostNotEmpty, key)
				}
			}
			t.Logf("replicas=%d: crashed member owned %d of %d buckets when asked, the survivors held no copy of %d at the kill (%d unsure: some of their partition's); %d started again full, %d empty; routing settled %v after the kill",
				rf, owned, n, len(lostKeys), unsure, full, empty, settled.Round(time.Millisecond))
			// With 2 replicas, a bucket can still start full while the
			// survivors' Olric tables disagree after the crash: the open
			// case the package documentation names ("Lost state"; a copy a
			// survivor holds is read from it whatever the owner's table
			// lists, readWide, but under -race beside 2 busy loops one run
			// of 3 still started 19 full). It is bounded at a tenth of the
			// crashed member's buckets, not excused.
			allowed := 0
			if rf == 2 {
				allowed = owned / 10
			}
			if full > allowed {
				t.Errorf("%d buckets started again full (a second capacity each), want at most %d", full, allowed)
			} else if full > 0 {
				t.Logf("%d buckets started again full: the open case of two replicas (see above)", full)
			}
			if rf == 1 && owned != len(lostKeys) {
				t.Logf("the victim's ownership when asked (%d) is not what died with it (%d): its partitions moved meanwhile", owned, len(lostKeys))
			}
			if len(emptyHeld) > 0 {
				t.Errorf("%d buckets started empty while a survivor held their partition's data (under-admission): %s", len(emptyHeld), diagOf(t, kids[:2], emptyHeld))
			}
			// A bucket no survivor held that is not empty started full
			// (failed above) or kept its state, most likely one the victim
			// was moving to a survivor when it died (Olric copies a
			// fragment to its new holder, which stores it when it gets to
			// it: starved, after the reads above; seen once, 8 of 80, none
			// full, the victim owning nothing when asked, as after a false
			// death). Keeping a state is no over-admission.
			if len(lostNotEmpty) > full {
				t.Logf("%d buckets no survivor held at the kill kept their state (arrived late): %v", len(lostNotEmpty)-full, lostNotEmpty)
			}
			if rf == 2 && len(lostKeys) > 0 {
				t.Errorf("%d buckets lost with two replicas: %v", len(lostKeys), slices.Sorted(maps.Keys(lostKeys)))
			}
			for _, k := range kids[:2] {
				k.send(t, "STOP")
			}
		})
	}
}

// TestCrashWindow measures how long the keys of a crashed member stay
// unavailable with the default timings of each profile: one of three
// member processes is killed (SIGKILL) and another checks one of its keys,
// each attempt bounded by 100 ms, until a check succeeds. The window is
// memberlist's failure detection (a probe, then the suspicion timeout)
// plus Olric's routing update plus HandoverGrace; the package
// documentation quotes these figures.
func TestCrashWindow(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	for _, profile := range []string{"local", "lan"} {
		t.Run(profile, func(t *testing.T) {
			const n = 300
			kids := startChildren(t, 3, 1, profile)
			kids[2].send(t, fmt.Sprint("OWNKEY ", n))
			key := kids[2].expect(t, "OWNKEY")
			if err := kids[2].cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			kids[0].send(t, "OUTAGE "+key)
			ms, _ := strconv.Atoi(kids[0].expect(t, "OUTAGE"))
			t.Logf("%s: a crashed member's key was unavailable for %v", profile, time.Duration(ms)*time.Millisecond)
			// Generous: failure detection alone takes seconds; what must
			// not happen is a key that never comes back.
			if limit := 30 * time.Second; time.Duration(ms)*time.Millisecond > limit {
				t.Errorf("unavailable for %v, limit %v", time.Duration(ms)*time.Millisecond, limit)
			}
			for _, k := range kids[:2] {
				k.send(t, "STOP")
			}
		})
	}
}
