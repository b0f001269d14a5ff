package core

import (
	"errors"
	"strconv"
	"time"
)

// TokensInheritance says how available tokens carry over when a bucket's
// configuration is replaced. Bandwidths are matched by ID; a bandwidth without
// an ID matches the old one without an ID only when each configuration has
// exactly one such bandwidth. Unmatched new bandwidths start fresh.
type TokensInheritance uint8

const (
	// InheritProportionally scales tokens, with the fraction of a token
	// already earned, by newCapacity/oldCapacity, rounding down; a bandwidth
	// at or above its old capacity (forced tokens) becomes full.
	InheritProportionally TokensInheritance = iota
	// InheritAsIs keeps tokens, reduced to the new capacity when above it.
	InheritAsIs
	// InheritReset forgets the old state: the bucket starts anew.
	InheritReset
	// InheritAdditive keeps tokens (capped at the new capacity) and adds the
	// capacity increase, if any; with an increase, a bandwidth at or above
	// its old capacity (forced tokens) becomes full.
	InheritAdditive

	numInheritances
)

// ErrUnknownStrategy: a TokensInheritance that is none of the strategies
// above.
var ErrUnknownStrategy = errors.New("unknown tokens inheritance strategy")

// Valid reports whether t is one of the strategies above.
func (t TokensInheritance) Valid() bool { return t < numInheritances }

// String returns the Bucket4j name in lower case, words joined by hyphens
// ("proportionally", "as-is", "reset", "additive"), as every String method of
// the package spells its values; an invalid t reads TokensInheritance(n).
func (t TokensInheritance) String() string {
	switch t {
	case InheritProportionally:
		return "proportionally"
	case InheritAsIs:
		return "as-is"
	case InheritReset:
		return "reset"
	case InheritAdditive:
		return "additive"
	}
	return "TokensInheritance(" + strconv.Itoa(int(t)) + ")"
}

// ReplaceConfiguration switches b to cfg at now, carrying tokens over by
// strategy. cfg must be valid; the state of b is refilled first.
//
// Each new bandwidth that matches an old one (see TokensInheritance) takes
// over its tokens as Bucket4j's BucketState64BitsInteger does:
//   - A bandwidth at or above the old capacity (after ForceAddTokens) is
//     full at the new capacity under PROPORTIONALLY and under ADDITIVE with a
//     larger capacity; AS_IS, and ADDITIVE without a larger capacity, cap
//     the tokens at the new capacity. No strategy leaves more tokens than the
//     new capacity.
//   - The fraction of a token already earned carries over: PROPORTIONALLY
//     scales tokens and fraction together, (size + fraction) × new/old
//     capacity, and keeps the fractional part when the new bandwidth is
//     greedy; AS_IS and ADDITIVE keep the fraction when both bandwidths are
//     greedy and the tokens stay below the new capacity. A fraction of f
//     tokens is f×period in RoundingError, rescaled to the new period.
//
// Unlike Bucket4j, the arithmetic is exact (Bucket4j computes
// PROPORTIONALLY in doubles and truncates the period ratio of AS_IS and
// ADDITIVE to an integer before rescaling the fraction), and the last refill
// time comes from carriedRefill rather than from the old bandwidth: items 2,
// 4 and 5 of "Differences from Bucket4j" in the package doc.
func (b *State) ReplaceConfiguration(cfg Config, strategy TokensInheritance, now int64) {
	b.Refill(now)
	if strategy == InheritReset {
		v := b.ConfigVersion
		*b = NewState(cfg, now)
		b.ConfigVersion = v
		return
	}
	old, oldState := b.Config, b.Bands
	state := make([]BandState, len(cfg.Bandwidths))
	for j := range cfg.Bandwidths {
		nb := &cfg.Bandwidths[j]
		i := match(&old, &cfg, j)
		if i < 0 {
			state[j] = initBand(nb, now)
			continue
		}
		ob, os := &old.Bandwidths[i], oldState[i]
		st := strategy
		if st == InheritAdditive && nb.Capacity <= ob.Capacity {
			st = InheritAsIs // ADDITIVE without a capacity increase is AS_IS
		}
		s := BandState{LastRefill: carriedRefill(ob, nb, os.LastRefill, now)}
		switch {
		case st == InheritAsIs && os.Size >= nb.Capacity,
			st != InheritAsIs && os.Size >= ob.Capacity:
			s.Size = nb.Capacity
		case st == InheritProportionally:
			s.Size, s.RoundingError = proportional(&os, ob, nb)
			if nb.Style.intervally() {
				s.RoundingError = 0 // whole periods only: no fraction to carry
			}
		default: // AS_IS below the new capacity, ADDITIVE below the old
			s.Size = os.Size
			if st == InheritAdditive {
				s.Size += nb.Capacity - ob.Capacity // below nb.Capacity: no overflow
			}
			if !ob.Style.intervally() && !nb.Style.intervally() {
				s.RoundingError = rescaleFraction(os.RoundingError, ob.RefillPeriod, nb.RefillPeriod)
			}
		}
		state[j] = s
	}
	b.Config, b.Bands = cfg, state
}

// proportional returns floor(v) and the fraction of v as a rounding error of
// nb, where v = (s.Size + s.RoundingError/ob.period) × nb.Capacity /
// ob.Capacity is the exact PROPORTIONALLY size. It requires s.Size below
// ob.Capacity, so v is below nb.Capacity; a v below the int64 range
// saturates to math.MinInt64 with no fraction.
func proportional(s *BandState, ob, nb *Bandwidth) (size, roundingError int64) {
	return scaleWithFraction(s.Size, s.RoundingError, int64(ob.RefillPeriod), ob.Capacity, nb.Capacity,
		int64(nb.RefillPeriod))
}

// rescaleFraction returns the rounding error of the new period that stands
// for the same fraction of a token as r does for the old one:
// floor(r×newPeriod/oldPeriod), below newPeriod since r is below oldPeriod.
func rescaleFraction(r int64, oldPeriod, newPeriod time.Duration) int64 {
	q, _, _ := mulDiv(uint64(r), uint64(newPeriod), uint64(oldPeriod))
	return int64(q)
}

// carriedRefill picks the last refill time of a matched bandwidth so that the
// replacement mints no tokens: interval phases are kept when the period is,
// aligned bandwidths snap to their latest boundary at or before now.
func carriedRefill(ob, nb *Bandwidth, last, now int64) int64 {
	switch {
	case nb.Style.aligned():
		if now < nb.FirstRefill {
			return satAdd(nb.FirstRefill, -int64(nb.RefillPeriod))
		}
		return now - int64(diff(now, nb.FirstRefill)%uint64(nb.RefillPeriod))
	case nb.Style.intervally() && ob.Style.intervally() && ob.RefillPeriod == nb.RefillPeriod:
		return last
	}
	return max(last, now)
}

// match returns the index in old of the bandwidth that new bandwidth j takes
// over from, or -1.
func match(old, cfg *Config, j int) int {
	id := cfg.Bandwidths[j].ID
	if id != "" {
		for i := range old.Bandwidths {
			if old.Bandwidths[i].ID == id {
				return i
			}
		}
		return -1
	}
	if countAnonymous(cfg) != 1 || countAnonymous(old) != 1 {
		return -1
	}
	for i := range old.Bandwidths {
		if old.Bandwidths[i].ID == "" {
			return i
		}
	}
	return -1
}

func countAnonymous(c *Config) int {
	n := 0
	for i := range c.Bandwidths {
		if c.Bandwidths[i].ID == "" {
			n++
		}
	}
	return n
}
