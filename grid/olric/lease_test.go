package olric

import (
	"context"
	"math"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/core/wire"
	"github.com/bucketgrid/bucketgrid/grid/olric/internal/fence"
	"github.com/bucketgrid/bucketgrid/grid/olric/internal/frame"
)

// leaseSim runs the lease protocol between one simulated owner (the owner
// side's own functions: leaseRequest, leaseExec.prepare, wire.Process,
// splitLease) and several holders (lease.decide, leaseKey's demand) on a
// fake clock, with no network: what the cluster does, minus transport.
type leaseSim struct {
	cfg      core.Config
	stored   []byte
	now      int64
	life     int64 // how long holders use a lease; the bound is for trueLife
	minDem   int64
	holders  []simHolder
	admitted []int64 // owner times of admitted tokens
	// owner events for the give-back check
	avail    []simPoint // owner's available tokens after each owner request
	grants   []simGrant
	ownerAdm []int64 // owner times of the admissions the owner decided
	leased   int     // checks decided on a lease
	rec      fence.Record
}

type simHolder struct {
	key   leaseKey
	grant int // index in grants of the current lease, -1 for none
}

type simPoint struct{ at, tokens int64 }

type simGrant struct {
	at, granted int64
	used        int64
}

var consume1 = wire.Request{Mode: wire.ModeBare, Ops: []wire.Op{{Kind: wire.OpTryConsume, Tokens: 1}}}

func newLeaseSim(t *testing.T, bw core.Bandwidth, holders int, life time.Duration) *leaseSim {
	t.Helper()
	cfg, err := core.NewConfig(bw)
	if err != nil {
		t.Fatal(err)
	}
	st := core.NewState(cfg, 0)
	s := &leaseSim{cfg: cfg, stored: wire.AppendState(nil, &st), life: int64(life), minDem: 2,
		holders: make([]simHolder, holders), rec: fence.Record{Gen: 1}}
	for i := range s.holders {
		s.holders[i].grant = -1
	}
	return s
}

// owner runs req (a lease request when lx is set) as execOwnerLease does.
func (s *leaseSim) owner(t *testing.T, req *wire.Request, lx *leaseExec) outcome {
	t.Helper()
	if lx != nil {
		lx.prepare(s.stored, req, s.now, 1, &s.rec, s.now)
	}
	newStored, changed, resp := wire.Process(s.stored, *req, s.now)
	if resp.Status != wire.StatusOK {
		t.Fatalf("owner: %v %s", resp.Status, resp.Message)
	}
	if changed {
		s.stored = newStored
	}
	if lx != nil {
		lx.granted(&resp, s.now, s.life)
	}
	b, _ := wire.DecodeState(s.stored)
	s.avail = append(s.avail, simPoint{s.now, b.AvailableTokens(s.now)})
	return outcome{kind: frame.KindOK, resp: resp}
}

// check is one TryConsume(1) by holder i at the current time.
func (s *leaseSim) check(t *testing.T, i int) {
	t.Helper()
	h := &s.holders[i]
	e := &h.key
	if _, n, ok := e.l.decide(&consume1, s.now); ok {
		e.record(n, s.now, s.life)
		s.admitted = append(s.admitted, s.now)
		s.grants[h.grant].used += n
		s.leased++
		return
	}
	demand := e.demand(s.now, s.life)
	var o outcome
	if demand < s.minDem {
		o = s.owner(t, &consume1, nil)
	} else {
		var give giveBack
		if e.l.budget > 0 {
			give = giveBack{unused: e.l.budget, epoch: e.l.epoch, at: e.l.at, fp: e.l.fp, gen: e.l.gen}
		}
		e.l = lease{}
		h.grant = -1
		g := leaseRequest(&consume1, 2*demand)
		x := leaseExec{give: give}
		o = splitLease(s.owner(t, &g, &x), 1, &x)
		if gr := o.grant; gr != nil {
			e.l = lease{view: gr.view, budget: gr.granted, sent: s.now,
				expires: s.now + min(s.life, windowEnd(&gr.view, gr.at)), at: gr.at, epoch: gr.epoch, fp: gr.fp, gen: gr.gen}
			s.grants = append(s.grants, simGrant{at: s.now, granted: gr.granted})
			h.grant = len(s.grants) - 1
		}
	}
	if o.resp.Results[0].OK {
		s.admitted = append(s.admitted, s.now)
		s.ownerAdm = append(s.ownerAdm, s.now)
		e.record(1, s.now, s.life)
	}
}

// run drives n checks by random holders at random steps of up to step,
// with now and then a pause of up to 20 steps (so that buckets refill
// while leases hold tokens, and bursts follow).
func (s *leaseSim) run(t *testing.T, rng *rand.Rand, n int, step time.Duration) {
	t.Helper()
	for range n {
		d := rng.Int64N(int64(step) + 1)
		if rng.IntN(20) == 0 {
			d *= int64(1 + rng.IntN(20))
		}
		s.now += d
		s.check(t, rng.IntN(len(s.holders)))
	}
}

// worstExcess returns the largest (admitted in [a, b]) − (capacity +
// ⌈rate×(b−a)⌉) over all intervals whose ends are admitted checks: how
// far the schedule went beyond what an exact greedy bucket can ever admit
// in an interval of that length.
func worstExcess(admitted []int64, bw core.Bandwidth) int64 {
	worst := int64(math.MinInt64)
	for i := range admitted {
		for j := i; j < len(admitted); j++ {
			w := admitted[j] - admitted[i]
			refill := (w*bw.RefillTokens + int64(bw.RefillPeriod) - 1) / int64(bw.RefillPeriod)
			worst = max(worst, int64(j-i+1)-bw.Capacity-refill)
		}
	}
	return worst
}

// TestLeaseBoundGreedy searches random schedules of several leasing
// members on one greedy bucket for the interval admitting most beyond what
// the exact bucket can: it must stay within the stated bound, rate ×
// lease lifetime (plus one token of rounding), and leases used beyond
// their lifetime must break it.
func TestLeaseBoundGreedy(t *testing.T) {
	bw := core.Greedy(20, 100, time.Second) // 100 tokens/s
	life := 50 * time.Millisecond
	bound := int64(100*life/time.Second) + 1
	rng := rand.New(rand.NewPCG(1, 2))
	var worst int64 = math.MinInt64
	leased := 0
	for range 200 {
		s := newLeaseSim(t, bw, 1+rng.IntN(4), life)
		s.run(t, rng, 400, time.Duration(rng.Int64N(int64(10*time.Millisecond))+1))
		worst = max(worst, worstExcess(s.admitted, bw))
		leased += s.leased
	}
	t.Logf("worst interval: %d tokens beyond the exact bucket's most (bound %d); %d checks on leases", worst, bound, leased)
	if worst > bound {
		t.Fatalf("an interval admitted %d beyond the exact bucket, bound %d", worst, bound)
	}
	if leased == 0 {
		t.Fatal("no check was decided on a lease")
	}
	// The same search with leases that outlive the lifetime the bound is
	// stated for finds an interval beyond it.
	broken := int64(math.MinInt64)
	for range 200 {
		s := newLeaseSim(t, bw, 1+rng.IntN(4), life)
		s.life = int64(20 * life)
		s.run(t, rng, 400, time.Duration(rng.Int64N(int64(10*time.Millisecond))+1))
		broken = max(broken, worstExcess(s.admitted, bw))
	}
	t.Logf("leases used 20× their lifetime: worst %d beyond", broken)
	if broken <= bound {
		t.Fatalf("the search did not find leases that outlive their lifetime over the bound (worst %d, bound %d): it cannot judge", broken, bound)
	}
}

// TestLeaseWindowExact: on an intervally refilled bucket a lease ends
// before the next refill, so no window admits more than its tokens.
func TestLeaseWindowExact(t *testing.T) {
	for _, bw := range []core.Bandwidth{
		core.Intervally(30, 30, 100*time.Millisecond),
		core.IntervallyAligned(30, 30, 100*time.Millisecond, time.Unix(0, 7e6)),
	} {
		rng := rand.New(rand.NewPCG(3, 4))
		leased := 0
		for range 100 {
			s := newLeaseSim(t, bw, 1+rng.IntN(4), time.Second)
			s.run(t, rng, 400, time.Duration(rng.Int64N(int64(2*time.Millisecond))+1))
			leased += s.leased
			b, _ := wire.DecodeState(s.stored)
			period := int64(bw.RefillPeriod)
			phase := b.Bands[0].LastRefill % period
			per := map[int64]int64{}
			for _, at := range s.admitted {
				per[(at-phase+1000*period)/period]++ // floor, for times before the phase too
			}
			for w, n := range per {
				if n > bw.Capacity {
					t.Fatalf("%v: window %d admitted %d of %d", bw.Style, w, n, bw.Capacity)
				}
			}
		}
		if leased == 0 {
			t.Fatalf("%v: no check was decided on a lease", bw.Style)
		}
	}
}

// TestLeaseGiveBackNeverMints replays, after each schedule, the exact
// bucket in which every lease took only the tokens it used, at its grant:
// after every owner request the owner's bucket holds no more tokens than
// that one.
func TestLeaseGiveBackNeverMints(t *testing.T) {
	for _, bw := range []core.Bandwidth{
		core.Greedy(20, 100, time.Second),
		core.Intervally(30, 30, 100*time.Millisecond),
	} {
		rng := rand.New(rand.NewPCG(5, 6))
		gave := 0
		for range 100 {
			s := newLeaseSim(t, bw, 1+rng.IntN(4), 30*time.Millisecond)
			s.run(t, rng, 300, time.Duration(rng.Int64N(int64(2*time.Millisecond))+1))
			// exact replay: owner-decided admissions and each lease's used
			// part at its grant
			type ev struct{ at, n int64 }
			var evs []ev
			for _, g := range s.grants {
				evs = append(evs, ev{g.at, g.used})
				if g.used < g.granted {
					gave++
				}
			}
			for _, at := range s.ownerAdm {
				evs = append(evs, ev{at, 1})
			}
			exact := core.NewState(s.cfg, 0)
			sort.SliceStable(evs, func(i, j int) bool { return evs[i].at < evs[j].at })
			k := 0
			for _, p := range s.avail {
				for k < len(evs) && evs[k].at <= p.at {
					if evs[k].n > 0 {
						exact.ConsumeIgnoringRateLimits(evs[k].n, evs[k].at)
					}
					k++
				}
				if e := exact.AvailableTokens(p.at); p.tokens > e {
					t.Fatalf("%v: at %d the owner's bucket holds %d, the exact one %d", bw.Style, p.at, p.tokens, e)
				}
			}
		}
		if gave == 0 {
			t.Fatalf("%v: no lease had tokens left to give back", bw.Style)
		}
	}
}

// TestLeaseCluster: three members with leases on draw one window bucket
// from every member; checks are decided on leases, and the window admits
// no more than its tokens.
func TestLeaseCluster(t *testing.T) {
	ms := startCluster(t, 3, func(c *Config) { c.Leases.Enabled = true })
	cfg := testBucket(2000)
	var ok atomic.Int64
	var wg sync.WaitGroup
	for g := range 9 {
		m := ms[g%len(ms)]
		wg.Go(func() {
			for range 400 {
				resp, err := m.Execute(context.Background(), "hot", consumeReq(&cfg, 1))
				if err != nil {
					t.Error(err)
					return
				}
				if resp.Results[0].OK {
					ok.Add(1)
				}
			}
		})
	}
	wg.Wait()
	var leased int64
	for _, m := range ms {
		leased += m.leases.local.Load()
	}
	t.Logf("%d of 3600 checks admitted, %d decided on leases", ok.Load(), leased)
	if ok.Load() > 2000 {
		t.Fatalf("%d admitted by a window of 2000", ok.Load())
	}
	if leased == 0 {
		t.Fatal("no check was decided on a lease")
	}
	// an estimate goes to the owner: every member sees the owner's bucket
	for _, m := range ms {
		resp, err := m.Execute(context.Background(), "hot", availableReq(&cfg))
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.Results[0].Tokens; got < 0 || got > 2000-ok.Load() {
			t.Fatalf("via %s: %d left after %d admitted", m.Name(), got, ok.Load())
		}
	}
}

// TestLeaseDecidesServiceShapes: the batches the rate-limit service sends
// (an equal configuration, then its consumption and estimate) are decided
// on a lease; a different configuration, an estimate alone and an
// addition are not.
func TestLeaseDecidesServiceShapes(t *testing.T) {
	w := int64(1 << 20) // within core's refill ceiling of a token per nanosecond
	window, _ := core.NewConfig(core.IntervallyAligned(w, w, time.Second, time.Unix(0, 0)).WithID("window"))
	bucket, _ := core.NewConfig(core.Greedy(100, 100, time.Second).WithID("bucket"))
	other, _ := core.NewConfig(core.Greedy(50, 100, time.Second).WithID("bucket"))
	at := int64(time.Hour) + 3e8
	replace := func(c *core.Config) wire.Op {
		return wire.Op{Kind: wire.OpReplaceConfiguration, Config: c, Inheritance: core.InheritAdditive}
	}
	for _, tc := range []struct {
		name string
		cfg  *core.Config
		ops  []wire.Op
		ok   bool
	}{
		{"fixed window", &window, []wire.Op{replace(&window), {Kind: wire.OpTryConsumeAsMuchAsPossible, Tokens: 1}, {Kind: wire.OpEstimate, Tokens: w}}, true},
		{"token bucket", &bucket, []wire.Op{replace(&bucket), {Kind: wire.OpTryConsumeAndReturnRemaining, Tokens: 1}}, true},
		{"other configuration", &bucket, []wire.Op{replace(&other), {Kind: wire.OpTryConsumeAndReturnRemaining, Tokens: 1}}, false},
		{"estimate alone", &bucket, []wire.Op{{Kind: wire.OpEstimate, Tokens: 1}}, false},
		{"addition", &bucket, []wire.Op{{Kind: wire.OpAddTokens, Tokens: 1}, {Kind: wire.OpTryConsume, Tokens: 1}}, false},
	} {
		st := core.NewState(*tc.cfg, at)
		st.Refill(at)
		l := lease{view: st, budget: 10, sent: 0, expires: int64(time.Millisecond * 50), at: at}
		req := wire.Request{Mode: wire.ModeCreateOrReplace, Config: tc.cfg, Ops: tc.ops}
		resp, n, ok := l.decide(&req, int64(time.Millisecond))
		if ok != tc.ok {
			t.Fatalf("%s: decided on the lease %v, want %v", tc.name, ok, tc.ok)
		}
		if ok && (n != 1 || len(resp.Results) != len(tc.ops)) {
			t.Fatalf("%s: consumed %d, %d results", tc.name, n, len(resp.Results))
		}
		if tc.name == "fixed window" && ok && resp.Results[2].Wait != int64(time.Second)-3e8-int64(time.Millisecond) {
			t.Fatalf("fixed window: estimate waits %d ns for the window's end", resp.Results[2].Wait)
		}
	}
}

// TestLeaseExactOnly: with Leases.Exact alone, members lease a bucket
// whose every bandwidth is refilled intervally (a lease keeps it exact)
// and never a greedy one, whose every check goes to its owner.
func TestLeaseExactOnly(t *testing.T) {
	ms := startCluster(t, 3, func(c *Config) { c.Leases.Exact = true })
	window := testBucket(1 << 20)
	greedy, err := core.NewConfig(core.Greedy(1<<20, 1, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	leased := func() (n int64) {
		for _, m := range ms {
			n += m.leases.local.Load()
		}
		return n
	}
	hammer := func(key string, cfg *core.Config) int64 {
		before := leased()
		var wg sync.WaitGroup
		for g := range 9 {
			m := ms[g%len(ms)]
			wg.Go(func() {
				for range 300 {
					if _, err := m.Execute(context.Background(), key, consumeReq(cfg, 1)); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		return leased() - before
	}
	if n := hammer("greedy", &greedy); n != 0 {
		t.Fatalf("%d checks of a greedy bucket decided on leases with Leases.Exact", n)
	}
	if n := hammer("window", &window); n == 0 {
		t.Fatal("no check of a window bucket decided on a lease with Leases.Exact")
	}
	// what the members know of the greedy bucket is its owner's: exactly
	// what was consumed
	resp, err := ms[0].Execute(context.Background(), "greedy", availableReq(&greedy))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := resp.Results[0].Tokens, int64(1<<20-2700); got < want || got > want+1 {
		t.Fatalf("greedy bucket holds %d after 2700 checks, want %d (+1 of refill)", got, want)
	}
}

// TestLeaseExactOwnerGrantsNone: an owner with Leases.Exact alone grants
// no lease on a bucket with a greedy bandwidth, whatever a member with
// Leases.Enabled asks, nor when the request names one; it grants on a
// window bucket.
func TestLeaseExactOwnerGrantsNone(t *testing.T) {
	w := int64(1 << 20)
	config := func(bws ...core.Bandwidth) core.Config {
		c, err := core.NewConfig(bws...)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	window := config(core.IntervallyAligned(w, w, time.Second, time.Unix(0, 0)).WithID("window"))
	bucket := config(core.Greedy(100, 100, time.Second).WithID("bucket"))
	mixed := config(core.IntervallyAligned(w, w, time.Second, time.Unix(0, 0)).WithID("window"),
		core.Greedy(100, 100, time.Second).WithID("bucket"))
	at := int64(time.Hour)
	for _, tc := range []struct {
		name          string
		stored, named *core.Config
		grant         bool
	}{
		{"window", &window, &window, true},
		{"window created", nil, &window, true},
		{"greedy", &bucket, &bucket, false},
		{"greedy created", nil, &bucket, false},
		{"greedy and window", &mixed, &mixed, false},
		{"greedy stored, window named", &bucket, &window, false},
		{"window stored, greedy named", &window, &bucket, false},
	} {
		var stored []byte
		if tc.stored != nil {
			st := core.NewState(*tc.stored, at)
			stored = wire.AppendState(nil, &st)
		}
		req := wire.Request{Mode: wire.ModeCreateIfAbsent, Config: tc.named, Ops: []wire.Op{{Kind: wire.OpTryConsume, Tokens: 1}}}
		g := leaseRequest(&req, 10)
		x := leaseExec{exact: true}
		rec := fence.Record{Gen: 1}
		x.prepare(stored, &g, at, 1, &rec, at)
		if x.noGrant == tc.grant {
			t.Fatalf("%s: grant %v, want %v", tc.name, !x.noGrant, tc.grant)
		}
		_, _, resp := wire.Process(stored, g, at)
		x.granted(&resp, at, int64(time.Second))
		o := splitLease(outcome{kind: frame.KindOK, resp: resp}, 1, &x)
		if (o.grant != nil) != tc.grant {
			t.Fatalf("%s: granted %+v, want a grant %v", tc.name, o.grant, tc.grant)
		}
	}
}
