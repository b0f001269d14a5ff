package olric

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/core"
)

// TestLostReachesJoiner kills one of three member processes (SIGKILL,
// ReplicaCount 1) after 300 buckets were drawn down, so that the two
// survivors take its partitions over without a copy and record the loss;
// then a member joins that read none of that and takes some of those
// partitions over from the survivors: a fresh one ("joined"), or the
// victim restarted at its address ("restarted"), which takes its old
// partitions back. A bucket whose state died with the victim and that
// nobody touched since is absent wherever it lands; on the joiner it must
// not start full (a second capacity each): the loss record travels with
// the partition. Before, the joiner had no record, and every such bucket
// it took over started full.
func TestLostReachesJoiner(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	t.Run("joined", func(t *testing.T) { lostReachesJoiner(t, false) })
	t.Run("restarted", func(t *testing.T) { lostReachesJoiner(t, true) })
}

// lostReachesJoiner is TestLostReachesJoiner, the joiner being the victim
// restarted at its address when restart is set.
func lostReachesJoiner(t *testing.T, restart bool) {
	const n = 300
	kids := startChildren(t, 3, 1, "test")
	for _, k := range kids {
		k.send(t, "WAIT 3")
		k.expect(t, "STABLE")
	}
	kids[0].send(t, fmt.Sprint("SEED ", n))
	kids[0].expect(t, "SEEDED")
	all := make([]string, n)
	for i := range all {
		all[i] = fmt.Sprint("crash-", i)
	}
	partOf, perPart := map[string]string{}, map[string]int{}
	kids[0].send(t, "DIAG "+strings.Join(all, ","))
	for _, d := range strings.Split(kids[0].expect(t, "DIAG"), ";") {
		key, rest, _ := strings.Cut(d, "=")
		p, _, _ := strings.Cut(rest, " ")
		partOf[key] = p
		perPart[p]++
	}
	if err := kids[2].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	for _, k := range kids[:2] {
		k.send(t, "WAIT 2")
		k.expect(t, "STABLE")
	}
	// What died with the victim: the buckets of the partitions no
	// survivor holds an entry of (read 0, 1, 0 as TestCrash does).
	var held []map[string]int
	for _, i := range []int{0, 1, 0} {
		kids[i].send(t, "DIAG "+strings.Join(all, ","))
		held = append(held, diagHeld(kids[i].expect(t, "DIAG")))
	}
	var lostKeys []string
	for _, key := range all {
		h := 0
		for _, m := range held {
			h = max(h, m[partOf[key]])
		}
		if h == 0 {
			lostKeys = append(lostKeys, key)
		}
	}
	if len(lostKeys) == 0 {
		t.Fatal("no bucket died with the victim: nothing to judge")
	}
	// The survivors wrote their lost marks (in the background).
	for _, k := range kids[:2] {
		k.send(t, "MARKED")
		k.expect(t, "MARKED")
	}
	// A member joins the two survivors.
	p := freeBase(t)
	spec := fmt.Sprintf("%d %d 3 1 test %s", p, p+2, gossipAddr(kids[0]))
	if restart {
		spec = strings.TrimPrefix(kids[2].cmd.Env[len(kids[2].cmd.Env)-1], childEnv+"=")
	}
	joiner := startJoiner(t, spec)
	for _, k := range []*child{kids[0], kids[1], joiner} {
		k.send(t, "WAIT 3")
		k.expect(t, "STABLE")
	}
	joiner.send(t, "MINE "+strings.Join(lostKeys, ","))
	mine := joiner.expect(t, "MINE")
	if mine == "-" {
		t.Fatalf("the joiner took over none of the %d lost buckets: nothing to judge", len(lostKeys))
	}
	onJoiner := strings.Split(mine, ",")
	kids[0].send(t, fmt.Sprint("LOST ", n))
	f := strings.Fields(kids[0].expect(t, "LOST"))
	full, _ := strconv.Atoi(f[0])
	empty, _ := strconv.Atoi(f[1])
	fullKeys := strings.Split(f[2], ",")
	emptyKeys := strings.Split(f[3], ",")
	fullOnJoiner := 0
	for _, key := range onJoiner {
		if slices.Contains(fullKeys, key) {
			fullOnJoiner++
		}
	}
	emptyOnJoiner := 0
	for _, key := range onJoiner {
		if slices.Contains(emptyKeys, key) {
			emptyOnJoiner++
		}
	}
	t.Logf("%d of %d buckets died with the victim; the joiner took over %d of them: %d started full there, %d empty; in all %d full, %d empty",
		len(lostKeys), n, len(onJoiner), fullOnJoiner, emptyOnJoiner, full, empty)
	if full > 0 {
		some := strings.Join(fullKeys[:min(len(fullKeys), 8)], ",")
		for i, k := range []*child{kids[0], kids[1], joiner} {
			k.send(t, "DIAG "+some)
			t.Logf("member %d (2: the joiner): %s", i, k.expect(t, "DIAG"))
		}
		if fullOnJoiner > 0 {
			t.Errorf("%d of the lost buckets the joiner took over started again full (a second capacity each), want 0", fullOnJoiner)
		}
		// A survivor that recorded no loss of a partition it took over
		// starts its buckets full: TestCrash's open case ("Lost state"),
		// which TestCrash judges; here only the joiner is.
		if full > fullOnJoiner {
			t.Logf("%d buckets started full on the survivors: TestCrash's open case", full-fullOnJoiner)
		}
	}
	for _, k := range []*child{kids[0], kids[1], joiner} {
		k.send(t, "STOP")
	}
}

// startJoiner starts a child member with spec (see childMain) and waits
// until it is READY, starting it again when its start fails, for up to 5
// minutes: what the test judges is where the joiner's buckets start, not
// how fast it joins. Under the race detector at a load of 20, a victim
// restarted at its address failed Start once after JoinTimeout (30 s),
// its gossip still refuting the old process's death.
func startJoiner(t *testing.T, spec string) *child {
	t.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		c := startChild(t, childEnv, spec)
		var failed string
		for failed == "" && c.out.Scan() {
			line := c.out.Text()
			if line == "READY" {
				return c
			}
			if strings.HasPrefix(line, "ERROR") {
				failed = line
			}
		}
		if failed == "" {
			failed = fmt.Sprint("exited: ", c.out.Err())
		}
		if time.Now().After(deadline) {
			t.Fatalf("the joiner did not start in 5 minutes; last: %s", failed)
		}
		t.Logf("the joiner's start failed (%s); starting it again", failed)
		c.in.Close()
		c.cmd.Wait()
	}
}

// gossipAddr is the gossip address of child c, started by startChild
// with its spec (see childMain) last in its environment.
func gossipAddr(c *child) string {
	spec := strings.Fields(strings.TrimPrefix(c.cmd.Env[len(c.cmd.Env)-1], childEnv+"="))
	return "127.0.0.1:" + spec[1]
}

// TestLostMarkQueue: after a routing read, a member queues a lost mark
// for each partition with a loss the read before did not record, whoever
// owns it, and for each lost partition it acquired, at that loss, and
// none under LostFull; each partition's mark key hashes to that partition
// in the marks' DMap.
func TestLostMarkQueue(t *testing.T) {
	read := func(owners []string, lostAt []int64) *routes { return &routes{owners: owners, lostAt: lostAt} }
	for _, tc := range []struct {
		name     string
		state    LostState
		prev, nr *routes
		want     map[uint64][]int64
	}{
		{"first read", LostEmpty, nil, read([]string{"s", "s", "x"}, []int64{0, 5, 5}), map[uint64][]int64{1: {5}, 2: {5}}},
		{"acquired", LostEmpty, read([]string{"x", "s", "x"}, []int64{5, 5, 5}),
			read([]string{"s", "s", "x"}, []int64{5, 5, 5}), map[uint64][]int64{0: {5}}},
		{"lost again", LostEmpty, read([]string{"s", "s", "x"}, []int64{5, 5, 5}),
			read([]string{"s", "s", "x"}, []int64{5, 9, 9}), map[uint64][]int64{1: {9}, 2: {9}}},
		{"unchanged", LostEmpty, read([]string{"s", "x", "x"}, []int64{5, 5, 0}),
			read([]string{"s", "x", "x"}, []int64{5, 5, 0}), map[uint64][]int64{}},
		{"handed away", LostEmpty, read([]string{"s", "x", "x"}, []int64{5, 5, 0}),
			read([]string{"x", "x", "x"}, []int64{5, 5, 0}), map[uint64][]int64{}},
		{"LostFull", LostFull, nil, read([]string{"s", "s", "x"}, []int64{5, 5, 5}), map[uint64][]int64{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &Member{name: "s", cfg: Config{PartitionCount: 3, DMap: "bucketgrid", LostState: tc.state, Clock: clock.Wall()}}
			m.routing.marks.init(m)
			m.routing.marks.note(tc.prev, tc.nr)
			if !maps.EqualFunc(m.routing.marks.pending, tc.want, slices.Equal) {
				t.Errorf("queued %v, want %v", m.routing.marks.pending, tc.want)
			}
			for p, k := range m.routing.marks.keys {
				if got := xxhash.Sum64String("bucketgrid"+lostMarkSuffix+k) % 3; got != uint64(p) {
					t.Errorf("mark key %q of partition %d hashes to %d", k, p, got)
				}
			}
		})
	}
}

// TestLostMarkQueueKeepsEvery: two losses of one partition recorded
// before the writer ran are both queued, each once: a mark that got only
// the later could hide the earlier from a member that joined between
// them (see heedMark). Before, only the later was queued.
func TestLostMarkQueueKeepsEvery(t *testing.T) {
	m := &Member{name: "s", cfg: Config{PartitionCount: 1, DMap: "bucketgrid", Clock: clock.Wall()}}
	m.routing.marks.init(m)
	r := func(at int64) *routes { return &routes{owners: []string{"s"}, lostAt: []int64{at}} }
	m.routing.marks.note(nil, r(5))
	m.routing.marks.note(r(5), r(9))
	m.routing.marks.note(r(9), r(9))
	if got := m.routing.marks.pending[0]; !slices.Equal(got, []int64{5, 9}) {
		t.Errorf("queued %v, want [5 9]", got)
	}
}

// TestLostMarkHeeded: a member heeds a partition's mark only of a loss
// before its first routing read returned (it could not judge that one),
// the latest such, however many later losses the mark holds; of a later
// one its own record decides, so that a mark a split's other side wrote
// changes nothing on a member that ran through the split. A full mark
// whose losses all came later may have dropped an earlier one: the member
// heeds the oldest it kept (an under-admission).
func TestLostMarkHeeded(t *testing.T) {
	full := make([]int64, maxMarkLosses)
	for i := range full {
		full[i] = int64(200 + i)
	}
	for _, tc := range []struct {
		name        string
		at          int64
		mark        []int64
		since, want int64
	}{
		{"no mark", 0, nil, 100, 0},
		{"a loss before the member started", 0, []int64{50}, 100, 50},
		{"a loss it recorded later too", 150, []int64{50}, 100, 150},
		{"a loss after it started, not recorded", 0, []int64{150}, 100, 0},
		{"a loss after it started, recorded", 160, []int64{150}, 100, 160},
		{"no routing read yet", 0, []int64{50}, 0, 0},
		{"a loss before it started, then one after", 0, []int64{30, 50, 150}, 100, 50},
		{"a loss at its start", 0, []int64{50, 100, 150}, 100, 100},
		{"a full mark of later losses", 0, full, 100, 200},
		{"a full mark, a kept loss before it started", 0, append([]int64{90}, full[1:]...), 100, 90},
	} {
		if got := heedMark(tc.at, tc.mark, tc.since); got != tc.want {
			t.Errorf("%s: heedMark(%d, %v, %d) = %d, want %d", tc.name, tc.at, tc.mark, tc.since, got, tc.want)
		}
	}
}

// TestLostMarkLaterLoss is TestLostReachesJoiner's failure beside 8 busy
// loops, made deterministic: a member joins after a partition was lost
// (its own reads cannot judge that loss; the mark says it), then the
// partition is lost again in the other members' reads (gossip on a
// starved machine declaring living members dead) but not in this
// member's, and they write that later loss to the mark. A bucket of the
// partition this member creates must still start as lost at the first
// loss. Before, a mark kept only the latest loss, which the member, having
// judged it, ignored: 13 of the 52 lost buckets a joiner took over started
// full. A later loss alone, which the member judged, changes nothing.
func TestLostMarkLaterLoss(t *testing.T) {
	m := startCluster(t, 1, nil)[0]
	// The marks below stand for other members' writes: a member whose
	// gossip never named another reads no mark (TestFirstTouchAlone).
	m.node.others.Store(true)
	lm := &m.routing.marks
	since := lm.since.Load()
	if since == 0 {
		t.Fatal("no routing read returned yet")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg, _ := core.NewConfig(core.Intervally(100, 100, time.Hour))
	keys := ownedKeys(m, "later-loss-", 2)
	if m.Partition(keys[0]) == m.Partition(keys[1]) {
		keys[1] = ownedKeys(m, "later-loss-b", 40)[39]
	}
	// keys[0]: lost before the member started, and again after.
	// keys[1]: lost only after, in the others' reads.
	before, after := since-int64(time.Second), m.cfg.Clock.Now()+1
	for _, w := range []struct {
		key string
		at  int64
	}{{keys[0], before}, {keys[0], after}, {keys[1], after}} {
		if err := lm.write(ctx, m.Partition(w.key), w.at); err != nil {
			t.Fatal(err)
		}
	}
	for i, want := range []int64{0, 100} {
		resp, err := m.Execute(ctx, keys[i], availableReq(&cfg))
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.Results[0].Tokens; got != want {
			t.Errorf("%s (partition %d): created with %d tokens, want %d", keys[i], m.Partition(keys[i]), got, want)
		}
	}
}

// TestLostMarkCorrupt is an operator's (or a bad disk's) garbage in a
// partition's lost mark: the member cannot tell when the partition was
// lost, nor that it was not, so a bucket it creates there starts empty,
// refilling from the creation (an under-admission), and the member says
// so in its log; a loss recorded later overwrites the garbage. Before,
// garbage counted as no mark and the bucket started full.
func TestLostMarkCorrupt(t *testing.T) {
	for _, garbage := range [][]byte{[]byte("bad"), {}, make([]byte, 12)} {
		t.Run(fmt.Sprintf("%d bytes", len(garbage)), func(t *testing.T) {
			var logs syncBuffer
			m := startCluster(t, 1, func(c *Config) { c.LogOutput = &logs })[0]
			// As if other members had written to the marks: a member
			// whose gossip never named another reads none
			// (TestFirstTouchAlone).
			m.node.others.Store(true)
			key := "corrupt-mark"
			p := m.Partition(key)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			dm, err := m.routing.marks.dmap()
			if err != nil {
				t.Fatal(err)
			}
			if err := dm.Put(ctx, m.routing.marks.keys[p], garbage); err != nil {
				t.Fatal(err)
			}
			cfg, _ := core.NewConfig(core.Intervally(100, 100, time.Hour))
			resp, err := m.Execute(ctx, key, availableReq(&cfg))
			if err != nil {
				t.Fatal(err)
			}
			if got := resp.Results[0].Tokens; got != 0 {
				t.Errorf("a bucket created under a corrupt lost mark holds %d tokens, want 0 (lost: empty)", got)
			}
			if !strings.Contains(logs.String(), fmt.Sprintf("lost mark of partition %d", p)) {
				t.Errorf("the corrupt mark was not reported; log:\n%s", logs.String())
			}
			// A loss recorded later is stored over the garbage.
			if err := m.routing.marks.write(ctx, p, 42); err != nil {
				t.Fatalf("writing a mark over garbage: %v", err)
			}
			if at, err := m.routing.marks.read(ctx, dm, p); err != nil || !slices.Equal(at, []int64{42}) {
				t.Errorf("mark after a write over garbage: %v, %v; want [42]", at, err)
			}
		})
	}
}
