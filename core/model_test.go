package core_test

import (
	"fmt"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/internal/harness/randconfig"
	"math"
	"math/big"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

// An independent reference model of Bucket4j's bucket, in math/big: it never
// overflows, so wherever core takes a 128-bit or saturating shortcut, the
// model computes the exact value and the two must agree. The model follows
// Bucket4j's state machine (per bandwidth: size, last refill, carried
// remainder of refillTokens×elapsed/period) and shares no code with core.
//
// Where bucketgrid deliberately differs from Bucket4j (the "Differences from
// Bucket4j" of the package doc), the model states bucketgrid's rule and says
// so: waits are rounded up and a greedy wait counts from the last refill when
// the clock reads earlier (delay), the replaced last refill time (replace),
// exact fractions where Bucket4j uses doubles or truncates a ratio (replace).

var (
	bigMaxInt64 = big.NewInt(math.MaxInt64)
	bigMinInt64 = big.NewInt(math.MinInt64)
)

func bi(v int64) *big.Int { return big.NewInt(v) }

type mBand struct {
	cfg     core.Bandwidth
	size    *big.Int
	last    *big.Int
	carried *big.Int
}

type model struct {
	bands []mBand
}

func newModel(cfg core.Config, now int64) *model {
	m := &model{}
	for _, b := range cfg.Bandwidths {
		m.bands = append(m.bands, newMBand(b, now))
	}
	return m
}

func newMBand(b core.Bandwidth, now int64) mBand {
	mb := mBand{cfg: b, size: bi(b.Capacity), last: bi(now), carried: bi(0)}
	if b.HasInitialTokens {
		mb.size = bi(b.InitialTokens)
	}
	if b.Style == core.RefillIntervallyAligned || b.Style == core.RefillIntervallyAlignedAdaptive {
		// the period before the first refill is the current one
		last := new(big.Int).Sub(bi(b.FirstRefill), bi(int64(b.RefillPeriod)))
		if last.Cmp(bigMinInt64) < 0 {
			last = bi(math.MinInt64)
		}
		mb.last = last
		if b.Style == core.RefillIntervallyAlignedAdaptive && now < b.FirstRefill {
			// min(capacity, max(0, capacity-refill) + before*refill/period)
			base := bi(max(b.Capacity-b.RefillTokens, 0))
			before := new(big.Int).Sub(bi(b.FirstRefill), bi(now))
			add := new(big.Int).Mul(before, bi(b.RefillTokens))
			add.Quo(add, bi(int64(b.RefillPeriod)))
			base.Add(base, add)
			if base.Cmp(bi(b.Capacity)) > 0 {
				base = bi(b.Capacity)
			}
			mb.size = base
		}
	}
	return mb
}

func (mb *mBand) refill(now int64) {
	t := bi(now)
	if t.Cmp(mb.last) <= 0 {
		return
	}
	period := bi(int64(mb.cfg.RefillPeriod))
	elapsed := new(big.Int).Sub(t, mb.last)
	if mb.cfg.Style != core.RefillGreedy {
		periods := new(big.Int).Quo(elapsed, period)
		if periods.Sign() == 0 {
			return
		}
		elapsed.Mul(periods, period)
	}
	mb.last = new(big.Int).Add(mb.last, elapsed)
	capacity := bi(mb.cfg.Capacity)
	if mb.size.Cmp(capacity) >= 0 {
		return // above capacity after a forced addition: refill pauses
	}
	// minted = floor((refillTokens*elapsed + carried) / period)
	num := new(big.Int).Mul(bi(mb.cfg.RefillTokens), elapsed)
	num.Add(num, mb.carried)
	minted, rem := new(big.Int).QuoRem(num, period, new(big.Int))
	size := new(big.Int).Add(mb.size, minted)
	if size.Cmp(capacity) >= 0 {
		mb.size, mb.carried = capacity, bi(0)
		return
	}
	mb.size, mb.carried = size, rem
}

func (m *model) refill(now int64) {
	for i := range m.bands {
		m.bands[i].refill(now)
	}
}

func (m *model) available() *big.Int {
	a := m.bands[0].size
	for _, b := range m.bands[1:] {
		if b.size.Cmp(a) < 0 {
			a = b.size
		}
	}
	return new(big.Int).Set(a)
}

// canDebit: a debt beyond int64 tokens is refused.
func (m *model) canDebit(n int64) bool {
	for _, b := range m.bands {
		if new(big.Int).Sub(b.size, bi(n)).Cmp(bigMinInt64) < 0 {
			return false
		}
	}
	return true
}

func (m *model) consume(n int64) {
	for i := range m.bands {
		m.bands[i].size = new(big.Int).Sub(m.bands[i].size, bi(n))
	}
}

// delay is the exact number of nanoseconds from now until every bandwidth
// holds n tokens, or nil when never (capped: n above a capacity).
func (m *model) delay(n, now int64, capped bool) *big.Int {
	d := bi(0)
	for _, b := range m.bands {
		if capped && n > b.cfg.Capacity {
			return nil
		}
		if b.size.Cmp(bi(n)) >= 0 {
			continue
		}
		deficit := new(big.Int).Sub(bi(n), b.size)
		period := bi(int64(b.cfg.RefillPeriod))
		tokens := bi(b.cfg.RefillTokens)
		var w *big.Int
		if b.cfg.Style == core.RefillGreedy {
			// smallest t: tokens*(t + (now-last)) + carried ≥ deficit*period,
			// with t counted from max(now, last)
			need := new(big.Int).Mul(deficit, period)
			need.Sub(need, b.carried)
			w = ceilDiv(need, tokens)
			if behind := new(big.Int).Sub(b.last, bi(now)); behind.Sign() > 0 {
				w.Add(w, behind)
			}
		} else {
			// the next boundary, then enough whole periods
			periods := ceilDiv(deficit, tokens)
			w = new(big.Int).Add(b.last, new(big.Int).Mul(periods, period))
			w.Sub(w, bi(now))
		}
		if w.Cmp(d) > 0 {
			d = w
		}
	}
	return d
}

func ceilDiv(a, b *big.Int) *big.Int {
	q, r := new(big.Int).QuoRem(a, b, new(big.Int))
	if r.Sign() > 0 {
		q.Add(q, bi(1))
	}
	return q
}

// sat clamps the model's value to the int64 range, as core reports it.
func sat(v *big.Int) int64 {
	if v.Cmp(bigMaxInt64) >= 0 {
		return math.MaxInt64
	}
	if v.Cmp(bigMinInt64) <= 0 {
		return math.MinInt64
	}
	return v.Int64()
}

func (m *model) timeToFull(now int64) *big.Int {
	d := bi(0)
	for _, b := range m.bands {
		if b.size.Cmp(bi(b.cfg.Capacity)) >= 0 {
			continue
		}
		one := &model{bands: []mBand{b}}
		if w := one.delay(b.cfg.Capacity, now, false); w.Cmp(d) > 0 {
			d = w
		}
	}
	return d
}

// check compares core's state with the model's, exactly.
func (m *model) check(t *testing.T, b *core.State, what string) {
	t.Helper()
	if len(b.Bands) != len(m.bands) {
		t.Fatalf("%s: %d bands, model %d", what, len(b.Bands), len(m.bands))
	}
	for i, mb := range m.bands {
		s := b.Bands[i]
		if !mb.size.IsInt64() || s.Size != mb.size.Int64() || !mb.last.IsInt64() || s.LastRefill != mb.last.Int64() ||
			s.RoundingError != mb.carried.Int64() {
			t.Fatalf("%s: band %d (%+v): core %+v, model size %v last %v carried %v",
				what, i, mb.cfg, s, mb.size, mb.last, mb.carried)
		}
	}
}

// tokens returns a positive token count of interest for b.
func tokens(g randconfig.Gen, b *core.State) int64 {
	c := b.Config.Bandwidths[g.R.IntN(len(b.Config.Bandwidths))].Capacity
	switch g.R.IntN(8) {
	case 0:
		return 1
	case 1:
		return c
	case 2:
		return min(c, math.MaxInt64-1) + 1
	case 3:
		return g.Pick(math.MaxInt64, math.MaxInt64-1, 1<<62)
	case 4:
		return g.Int64In(1, c)
	default:
		return g.Magnitude(min(c, 1<<20))
	}
}

// nextTime returns the next time: equal, 1 ns on, small, around a period, a huge
// jump, or backwards; always within the int64 range.
func nextTime(g randconfig.Gen, now int64, b *core.State) int64 {
	var d int64
	switch g.R.IntN(9) {
	case 0:
		d = 0
	case 1:
		d = 1
	case 2:
		d = g.Int64In(1, 1000)
	case 3:
		p := int64(b.Config.Bandwidths[g.R.IntN(len(b.Config.Bandwidths))].RefillPeriod)
		d = g.Pick(p, p-1, p/2, p/3+1)
	case 4:
		d = g.Magnitude(1 << 62)
	case 5:
		d = -g.Int64In(1, 1000)
	case 6:
		d = -g.Magnitude(1 << 40)
	default:
		d = g.Int64In(1, int64(time.Second))
	}
	if d > 0 && now > math.MaxInt64-d {
		return now
	}
	if d < 0 && now < math.MinInt64/2-d {
		return now
	}
	return now + d
}

var modelTrace = false

func TestModelProperties(t *testing.T) {
	seeds := 3000
	if testing.Short() {
		seeds = 300
	}
	for seed := range seeds {
		runModel(t, uint64(seed), 40)
	}
}

func runModel(t *testing.T, seed uint64, steps int) {
	t.Helper()
	g := randconfig.Gen{R: rand.New(rand.NewPCG(seed, 0x5eed))}
	now := g.Pick(0, 1, int64(1.7e18), g.Int64In(-1<<60, 1<<60))
	cfg := g.Config(now)
	if err := cfg.Validate(); err != nil {
		t.Fatalf("seed %d: generated an invalid configuration: %v", seed, err)
	}
	b := core.NewState(cfg.Clone(), now)
	m := newModel(cfg, now)
	m.check(t, &b, fmt.Sprintf("seed %d: new", seed))

	for step := range steps {
		prev := b.Clone()
		now = nextTime(g, now, &b)
		what := fmt.Sprintf("seed %d step %d at %d", seed, step, now)
		if modelTrace {
			t.Logf("%s: before %+v state %+v", what, prev.Config, prev.Bands)
		}
		switch op := g.R.IntN(12); op {
		case 0, 1:
			n := tokens(g, &b)
			got := b.TryConsume(n, now)
			m.refill(now)
			want := bi(n).Cmp(m.available()) <= 0
			if want {
				m.consume(n)
			}
			if got != want {
				t.Fatalf("%s: TryConsume(%d) = %v, model %v", what, n, got, want)
			}
		case 2, 3:
			n := tokens(g, &b)
			p := b.TryConsumeAndReturnRemaining(n, now)
			m.refill(now)
			avail := m.available()
			var want core.Probe
			if bi(n).Cmp(avail) <= 0 {
				m.consume(n)
				want = core.Probe{Consumed: true, Remaining: sat(new(big.Int).Sub(avail, bi(n)))}
			} else {
				// Bucket4j's ConsumptionProbe clamps remaining at zero
				want = core.Probe{Remaining: max(sat(avail), 0), WaitForRefill: math.MaxInt64}
				if d := m.delay(n, now, true); d != nil {
					want.WaitForRefill = time.Duration(sat(d))
				}
			}
			want.WaitForReset = time.Duration(sat(m.timeToFull(now)))
			if p != want {
				t.Fatalf("%s: TryConsumeAndReturnRemaining(%d) = %+v, model %+v", what, n, p, want)
			}
			if !p.Consumed {
				checkExactWait(t, &b, n, now, int64(p.WaitForRefill), what)
			}
		case 4:
			n := tokens(g, &b)
			e := b.EstimateAbilityToConsume(n, now)
			m.refill(now)
			avail := m.available()
			// Bucket4j's EstimationProbe clamps remaining at zero
			want := core.Estimate{CanBeConsumed: bi(n).Cmp(avail) <= 0, Remaining: max(sat(avail), 0)}
			if !want.CanBeConsumed {
				want.WaitForRefill = math.MaxInt64
				if d := m.delay(n, now, true); d != nil {
					want.WaitForRefill = time.Duration(sat(d))
				}
			}
			if e != want {
				t.Fatalf("%s: Estimate(%d) = %+v, model %+v", what, n, e, want)
			}
			if !e.CanBeConsumed {
				checkExactWait(t, &b, n, now, int64(e.WaitForRefill), what)
			}
		case 5:
			limit := g.Pick(math.MaxInt64, tokens(g, &b))
			got := b.TryConsumeAsMuchAsPossible(limit, now)
			m.refill(now)
			want := m.available()
			if want.Cmp(bi(limit)) > 0 {
				want = bi(limit)
			}
			if want.Sign() < 0 {
				want = bi(0)
			}
			if want.Sign() > 0 {
				m.consume(want.Int64())
			}
			if got != want.Int64() {
				t.Fatalf("%s: TryConsumeAsMuchAsPossible(%d) = %d, model %v", what, limit, got, want)
			}
		case 6:
			n := tokens(g, &b)
			b.AddTokens(n, now)
			m.refill(now)
			for i := range m.bands {
				mb := &m.bands[i]
				sum := new(big.Int).Add(mb.size, bi(n))
				if c := bi(mb.cfg.Capacity); sum.Cmp(c) >= 0 {
					mb.size, mb.carried = c, bi(0)
				} else {
					mb.size = sum
				}
			}
		case 7:
			n := tokens(g, &b)
			b.ForceAddTokens(n, now)
			m.refill(now)
			for i := range m.bands {
				mb := &m.bands[i]
				// Bucket4j keeps the carried fraction, even at or above
				// capacity, unless the sum overflows: then MaxInt64, no
				// fraction
				sum := new(big.Int).Add(mb.size, bi(n))
				if sum.Cmp(bigMaxInt64) > 0 {
					sum, mb.carried = bi(math.MaxInt64), bi(0)
				}
				mb.size = sum
			}
		case 8:
			n := tokens(g, &b)
			got := b.ConsumeIgnoringRateLimits(n, now)
			m.refill(now)
			d := m.delay(n, now, false)
			want := int64(math.MaxInt64)
			if d.Cmp(bigMaxInt64) < 0 && m.canDebit(n) {
				want = d.Int64()
				m.consume(n)
			}
			if got != want {
				t.Fatalf("%s: ConsumeIgnoringRateLimits(%d) = %d, model %v", what, n, got, d)
			}
		case 9:
			n := tokens(g, &b)
			maxWait := g.Pick(0, 1, math.MaxInt64, g.Magnitude(math.MaxInt64))
			got := b.Reserve(n, maxWait, now)
			m.refill(now)
			want := int64(math.MaxInt64)
			if d := m.delay(n, now, true); d != nil && d.Cmp(bigMaxInt64) < 0 && d.Int64() <= maxWait && m.canDebit(n) {
				want = d.Int64()
				m.consume(n)
			}
			if got != want {
				t.Fatalf("%s: Reserve(%d, %d) = %d, model %d", what, n, maxWait, got, want)
			}
		case 10:
			if g.R.IntN(2) == 0 {
				b.Reset(now)
				m.refill(now)
				for i := range m.bands {
					m.bands[i].size, m.bands[i].carried = bi(m.bands[i].cfg.Capacity), bi(0)
				}
			} else {
				got := b.AvailableTokens(now)
				m.refill(now)
				if want := sat(m.available()); got != want {
					t.Fatalf("%s: AvailableTokens = %d, model %d", what, got, want)
				}
			}
		case 11:
			next := g.Config(now)
			strategy := core.TokensInheritance(g.R.IntN(int(core.InheritAdditive) + 1))
			b.ReplaceConfiguration(next.Clone(), strategy, now)
			m.refill(now)
			m.replace(next, strategy, now)
		}
		m.check(t, &b, what)
	}
}

// replace is Bucket4j's configuration replacement: bandwidths matched by id
// (an anonymous one only when each side has exactly one), tokens carried by
// strategy, unmatched ones fresh.
func (m *model) replace(cfg core.Config, strategy core.TokensInheritance, now int64) {
	if strategy == core.InheritReset {
		*m = *newModel(cfg, now)
		return
	}
	anon := func(bs []core.Bandwidth) int {
		n := 0
		for _, b := range bs {
			if b.ID == "" {
				n++
			}
		}
		return n
	}
	var oldCfg []core.Bandwidth
	for _, b := range m.bands {
		oldCfg = append(oldCfg, b.cfg)
	}
	var bands []mBand
	for _, nb := range cfg.Bandwidths {
		idx := -1
		for i, ob := range oldCfg {
			if ob.ID == nb.ID && (nb.ID != "" || (anon(oldCfg) == 1 && anon(cfg.Bandwidths) == 1)) {
				idx = i
			}
		}
		if idx < 0 {
			bands = append(bands, newMBand(nb, now))
			continue
		}
		ob := m.bands[idx]
		size, carried := inherit(ob, nb, strategy)
		mb := mBand{cfg: nb, size: size, carried: carried}
		switch {
		case nb.Style == core.RefillIntervallyAligned || nb.Style == core.RefillIntervallyAlignedAdaptive:
			// the latest period boundary at or before now
			first, period := bi(nb.FirstRefill), bi(int64(nb.RefillPeriod))
			if now < nb.FirstRefill {
				mb.last = new(big.Int).Sub(first, period)
				if mb.last.Cmp(bigMinInt64) < 0 {
					mb.last = bi(math.MinInt64)
				}
			} else {
				since := new(big.Int).Sub(bi(now), first)
				mb.last = new(big.Int).Sub(bi(now), since.Mod(since, period))
			}
		case nb.Style == core.RefillIntervally && ob.cfg.Style != core.RefillGreedy && nb.RefillPeriod == ob.cfg.RefillPeriod:
			mb.last = ob.last // keep the interval phase
		default:
			mb.last = new(big.Int).Set(ob.last)
			if n := bi(now); n.Cmp(mb.last) > 0 {
				mb.last = n
			}
		}
		bands = append(bands, mb)
	}
	m.bands = bands
}

// inherit returns the size and carried remainder a matched bandwidth takes
// over from ob, by Bucket4j's replaceBandwidthAsIs, ...Proportional and
// ...Additive, with exact rationals where Bucket4j uses doubles (a
// deliberate difference): the carried fraction of a token is
// ob.carried/oldPeriod, and it becomes fraction×newPeriod.
func inherit(ob mBand, nb core.Bandwidth, strategy core.TokensInheritance) (size, carried *big.Int) {
	oldCap, newCap := bi(ob.cfg.Capacity), bi(nb.Capacity)
	fraction := new(big.Rat).SetFrac(ob.carried, bi(int64(ob.cfg.RefillPeriod)))
	greedy := ob.cfg.Style == core.RefillGreedy && nb.Style == core.RefillGreedy
	asIs := func() (*big.Int, *big.Int) {
		if ob.size.Cmp(newCap) >= 0 {
			return newCap, bi(0)
		}
		if !greedy {
			return ob.size, bi(0)
		}
		return ob.size, floorRat(new(big.Rat).Mul(fraction, ratInt(int64(nb.RefillPeriod))))
	}
	switch strategy {
	case core.InheritAsIs:
		return asIs()
	case core.InheritAdditive:
		if nb.Capacity <= ob.cfg.Capacity {
			return asIs()
		}
		if ob.size.Cmp(oldCap) >= 0 {
			return newCap, bi(0) // over-full (forced): full at the new capacity
		}
		size = new(big.Int).Add(ob.size, new(big.Int).Sub(newCap, oldCap))
		if !greedy {
			return size, bi(0)
		}
		return size, floorRat(new(big.Rat).Mul(fraction, ratInt(int64(nb.RefillPeriod))))
	default: // InheritProportionally
		if ob.size.Cmp(oldCap) >= 0 {
			return newCap, bi(0) // over-full (forced): full at the new capacity
		}
		v := new(big.Rat).Add(new(big.Rat).SetInt(ob.size), fraction)
		v.Mul(v, new(big.Rat).SetFrac(newCap, oldCap))
		size = floorRat(v)
		if size.Cmp(bigMinInt64) < 0 {
			return bi(math.MinInt64), bi(0) // core saturates, with no fraction
		}
		if nb.Style != core.RefillGreedy {
			return size, bi(0)
		}
		rest := new(big.Rat).Sub(v, new(big.Rat).SetInt(size))
		return size, floorRat(rest.Mul(rest, ratInt(int64(nb.RefillPeriod))))
	}
}

func ratInt(v int64) *big.Rat { return new(big.Rat).SetInt64(v) }

// floorRat returns the largest integer not above v.
func floorRat(v *big.Rat) *big.Int {
	return new(big.Int).Div(v.Num(), v.Denom()) // Euclidean, and Denom > 0
}

// TestBackwardsTimeNeverMints: a clock reading earlier than the last refill
// (clock skew between clients of a store) leaves every bandwidth as it was.
func TestBackwardsTimeNeverMints(t *testing.T) {
	for seed := range 2000 {
		g := randconfig.Gen{R: rand.New(rand.NewPCG(uint64(seed), 0xbac))}
		now := g.Int64In(-1<<61, 1<<61)
		b := core.NewState(g.Config(now), now)
		b.ConsumeIgnoringRateLimits(tokens(g, &b), now)
		now = nextTime(g, now, &b)
		b.Refill(now)
		before := b.Clone()
		atNow := b.Clone()
		available := atNow.AvailableTokens(now) // refilled at now already: changes nothing
		for range 10 {
			back := now - g.Pick(1, 2, g.Magnitude(1<<40), g.Magnitude(1<<61))
			b.Refill(back)
			if !reflect.DeepEqual(b.Bands, before.Bands) {
				t.Fatalf("seed %d: refill at %d (last %d) changed %+v to %+v", seed, back, now, before.Bands, b.Bands)
			}
			e := b.EstimateAbilityToConsume(1, back)
			if e.Remaining != max(available, 0) {
				t.Fatalf("seed %d: estimate at an earlier time reports %d tokens, %d before", seed, e.Remaining, available)
			}
		}
	}
}

// TestRefillPathIndependent: refilling at t1 then t2 gives the state of
// refilling at t2 alone, so a refill need not be written back.
func TestRefillPathIndependent(t *testing.T) {
	for seed := range 2000 {
		g := randconfig.Gen{R: rand.New(rand.NewPCG(uint64(seed), 0x9a7))}
		now := g.Int64In(-1<<61, 1<<61)
		b := core.NewState(g.Config(now), now)
		b.ConsumeIgnoringRateLimits(tokens(g, &b), now)
		direct := b.Clone()
		t1 := nextTime(g, now, &b)
		t2 := nextTime(g, t1, &b)
		b.Refill(t1)
		b.Refill(t2)
		direct.Refill(t2)
		if t1 <= t2 && !reflect.DeepEqual(b.Bands, direct.Bands) {
			t.Fatalf("seed %d: refill %d then %d = %+v, directly %+v", seed, t1, t2, b.Bands, direct.Bands)
		}
	}
}

// checkExactWait verifies that a refused request for n at now succeeds at
// now+wait and not at now+wait-1, on copies of b.
func checkExactWait(t *testing.T, b *core.State, n, now, wait int64, what string) {
	t.Helper()
	if wait <= 0 || wait == math.MaxInt64 || now > math.MaxInt64-wait {
		return
	}
	at := b.Clone()
	if !at.TryConsume(n, now+wait) {
		t.Fatalf("%s: refused %d at now+wait (wait %d), state %+v", what, n, wait, b.Bands)
	}
	before := b.Clone()
	if before.TryConsume(n, now+wait-1) {
		t.Fatalf("%s: %d available at now+wait-1 (wait %d): the wait is not the shortest", what, n, wait)
	}
}
