package core

import "math"

// BandState is the mutable state of one bandwidth.
type BandState struct {
	// Size is the number of tokens; it goes negative after an overdraft and
	// above capacity after a forced addition.
	Size int64
	// LastRefill is the time of the last refill, in the clock's nanoseconds.
	LastRefill int64
	// RoundingError carries the fraction of a token already earned, as
	// refillTokens×elapsed mod period; always in [0, period).
	RoundingError int64
}

// initBand returns the state of a new bandwidth at now.
func initBand(b *Bandwidth, now int64) BandState {
	s := BandState{Size: b.Capacity, LastRefill: now}
	if b.HasInitialTokens {
		s.Size = b.InitialTokens
	}
	if !b.Style.aligned() {
		return s
	}
	period := int64(b.RefillPeriod)
	s.LastRefill = satAdd(b.FirstRefill, -period)
	if b.Style == RefillIntervallyAlignedAdaptive && now < b.FirstRefill {
		base := b.Capacity - b.RefillTokens
		if base < 0 {
			base = 0
		}
		add, _, ok := mulDiv(diff(b.FirstRefill, now), uint64(b.RefillTokens), uint64(period))
		if !ok || add >= uint64(b.Capacity-base) {
			s.Size = b.Capacity
		} else {
			s.Size = base + int64(add)
		}
	}
	return s
}

// refill brings s up to now. Time at or before LastRefill mints nothing.
// Refilling is path-independent: refilling at t1 then t2 gives the same state
// as refilling at t2 alone.
func refill(b *Bandwidth, s *BandState, now int64) {
	prev := s.LastRefill
	if now <= prev {
		return
	}
	period := uint64(b.RefillPeriod)
	elapsed := diff(now, prev)
	if b.Style.intervally() {
		rem := elapsed % period
		elapsed -= rem
		if elapsed == 0 {
			return
		}
		now = int64(uint64(now) - rem)
	}
	s.LastRefill = now
	if s.Size >= b.Capacity {
		return // at or above capacity (forced): refill pauses
	}
	deficit := diff(b.Capacity, s.Size)
	q, r, ok := mulAddDiv(uint64(b.RefillTokens), elapsed, uint64(s.RoundingError), period)
	if !ok || q >= deficit {
		s.Size, s.RoundingError = b.Capacity, 0
		return
	}
	s.Size += int64(q)
	s.RoundingError = int64(r)
}

// delayFor returns the nanoseconds until s holds n tokens, assuming the
// bandwidth was refilled at now and holds fewer than n. math.MaxInt64 means
// never (or beyond the int64 range).
func delayFor(b *Bandwidth, s *BandState, n, now int64) int64 {
	deficit := diff(n, s.Size)
	tokens := uint64(b.RefillTokens)
	if !b.Style.intervally() {
		// smallest t with refillTokens*t + roundingError ≥ deficit*period,
		// counted from the last refill when the clock reads earlier than it
		t := ceilMulSubDiv(deficit, uint64(b.RefillPeriod), uint64(s.RoundingError), tokens)
		if now < s.LastRefill {
			t = satAdd(t, satInt(diff(s.LastRefill, now)))
		}
		return t
	}
	// the next boundary is LastRefill+period; compute its distance from now
	// without forming LastRefill+period, which may exceed int64 when the
	// distance does not
	period := int64(b.RefillPeriod)
	var wait int64
	if now <= s.LastRefill {
		wait = satAdd(satInt(diff(s.LastRefill, now)), period)
	} else {
		wait = max(period-satInt(diff(now, s.LastRefill)), 0)
	}
	if wait == math.MaxInt64 {
		return math.MaxInt64
	}
	if deficit <= tokens {
		return wait
	}
	more := (deficit - 1) / tokens // ceil((deficit-tokens)/tokens) further periods
	if more > math.MaxInt64 {
		return math.MaxInt64
	}
	return satAdd(wait, mulSat(int64(more), period))
}

// satInt converts a non-negative difference to int64, saturated.
func satInt(u uint64) int64 {
	if u > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(u)
}

// FillTime returns the nanoseconds an empty bandwidth takes to refill to its
// capacity: ceil(capacity×period/refillTokens) for greedy refill, whole
// periods for the intervally styles; math.MaxInt64 beyond the int64 range.
// It is the window of the bandwidth's RateLimit-Policy item.
func (b *Bandwidth) FillTime() int64 {
	empty := BandState{}
	return delayFor(b, &empty, b.Capacity, 0)
}
