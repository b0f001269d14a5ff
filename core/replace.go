package core

import "fmt"

// TokensInheritance says how available tokens carry over when a bucket's
// configuration is replaced. Bandwidths are matched by ID; a bandwidth without
// an ID matches the old one without an ID only when each configuration has
// exactly one such bandwidth. Unmatched new bandwidths start fresh.
type TokensInheritance uint8

const (
	// InheritProportionally scales tokens by newCapacity/oldCapacity.
	InheritProportionally TokensInheritance = iota
	// InheritAsIs keeps tokens, reduced to the new capacity when above it.
	InheritAsIs
	// InheritReset forgets the old state: the bucket starts anew.
	InheritReset
	// InheritAdditive keeps tokens (capped at the new capacity) and adds the
	// capacity increase, if any.
	InheritAdditive

	numInheritances
)

// String returns the Bucket4j name.
func (t TokensInheritance) String() string {
	switch t {
	case InheritProportionally:
		return "PROPORTIONALLY"
	case InheritAsIs:
		return "AS_IS"
	case InheritReset:
		return "RESET"
	case InheritAdditive:
		return "ADDITIVE"
	}
	return fmt.Sprintf("TokensInheritance(%d)", uint8(t))
}

// ReplaceConfiguration switches b to cfg at now, carrying tokens over by
// strategy. cfg must be valid; the state of b is refilled first.
func (b *Bucket) ReplaceConfiguration(cfg Config, strategy TokensInheritance, now int64) {
	b.Refill(now)
	if strategy == InheritReset {
		v := b.ConfigVersion
		*b = NewBucket(cfg, now)
		b.ConfigVersion = v
		return
	}
	old, oldState := b.Config, b.State
	state := make([]BandState, len(cfg.Bandwidths))
	for j := range cfg.Bandwidths {
		nb := &cfg.Bandwidths[j]
		i := match(&old, &cfg, j)
		if i < 0 {
			state[j] = initBand(nb, now)
			continue
		}
		ob, os := &old.Bandwidths[i], oldState[i]
		size := os.Size
		switch strategy {
		case InheritProportionally:
			size = scale(size, nb.Capacity, ob.Capacity)
		case InheritAsIs:
			size = min(size, nb.Capacity)
		case InheritAdditive:
			size = min(size, nb.Capacity)
			if nb.Capacity > ob.Capacity {
				size = satAdd(size, nb.Capacity-ob.Capacity)
			}
		}
		state[j] = BandState{Size: size, LastRefill: carriedRefill(ob, nb, os.LastRefill, now)}
		if ob.RefillPeriod == nb.RefillPeriod && ob.RefillTokens == nb.RefillTokens && ob.Style == nb.Style {
			state[j].RoundingError = os.RoundingError
		}
	}
	b.Config, b.State = cfg, state
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
