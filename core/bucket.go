package core

import (
	"errors"
	"math"
	"time"
)

// State is a bucket: a configuration with the state of each of its
// bandwidths, the record that is stored for a key. Its methods are the
// Bucket4j operations at an explicit time; each refills first. A State is not
// safe for concurrent use: the local bucket guards it with a mutex,
// distributed executors with a CAS or an owner lock.
//
// Token arguments must be positive; callers (the root package, Process)
// validate them.
type State struct {
	Config Config
	// ConfigVersion is the version of Config for implicit configuration
	// replacement; it never goes backwards.
	ConfigVersion int64
	// Bands holds the state of each bandwidth of Config, in order.
	Bands []BandState
}

// ErrCorruptState: stored bytes are not a State this version reads. A
// backend wraps it for a value it did not write; core/wire's Response.Err
// for StatusCorruptState.
var ErrCorruptState = errors.New("bucketgrid: corrupt stored state")

// NewState returns a fresh bucket for a valid configuration at now.
func NewState(cfg Config, now int64) State {
	b := State{Config: cfg, Bands: make([]BandState, len(cfg.Bandwidths))}
	for i := range cfg.Bandwidths {
		b.Bands[i] = initBand(&cfg.Bandwidths[i], now)
	}
	return b
}

// NewStateHolding returns the bucket of a valid configuration that held at
// most n tokens in each bandwidth at now and refills from then: NewState at
// now, brought up to now (an aligned bandwidth from its last boundary), each
// bandwidth's size then cut to n (a negative n is a debt). Its refill
// progress (RoundingError) is kept.
func NewStateHolding(cfg Config, now, n int64) State {
	b := NewState(cfg, now)
	b.Refill(now)
	for i := range b.Bands {
		b.Bands[i].Size = min(b.Bands[i].Size, n)
	}
	return b
}

// Clone returns a deep copy of b.
func (b *State) Clone() State {
	return State{Config: b.Config.Clone(), ConfigVersion: b.ConfigVersion,
		Bands: append([]BandState(nil), b.Bands...)}
}

// Refill brings every bandwidth up to now.
func (b *State) Refill(now int64) {
	for i := range b.Bands {
		refill(&b.Config.Bandwidths[i], &b.Bands[i], now)
	}
}

// available returns the minimum size over bandwidths; call after Refill.
func (b *State) available() int64 {
	a := b.Bands[0].Size
	for i := 1; i < len(b.Bands); i++ {
		if s := b.Bands[i].Size; s < a {
			a = s
		}
	}
	return a
}

// canDebit reports whether every bandwidth can give n > 0 tokens without its
// size leaving the int64 range (a deep overdraft could wrap around).
func (b *State) canDebit(n int64) bool {
	for i := range b.Bands {
		if b.Bands[i].Size < math.MinInt64+n {
			return false
		}
	}
	return true
}

func (b *State) consume(n int64) {
	for i := range b.Bands {
		b.Bands[i].Size -= n
	}
}

// delay returns the nanoseconds until n tokens are available in every
// bandwidth; math.MaxInt64 when never. With capped set, a request above any
// capacity is never satisfiable.
func (b *State) delay(n, now int64, capped bool) int64 {
	var d int64
	for i := range b.Bands {
		bw := &b.Config.Bandwidths[i]
		if capped && n > bw.Capacity {
			return math.MaxInt64
		}
		if n <= b.Bands[i].Size {
			continue
		}
		if w := delayFor(bw, &b.Bands[i], n, now); w > d {
			d = w
		}
	}
	return d
}

// TimeToFull returns the nanoseconds until every bandwidth is full again,
// math.MaxInt64 when never; call after Refill.
func (b *State) TimeToFull(now int64) int64 {
	var d int64
	for i := range b.Bands {
		bw := &b.Config.Bandwidths[i]
		if b.Bands[i].Size >= bw.Capacity {
			continue
		}
		if w := delayFor(bw, &b.Bands[i], bw.Capacity, now); w > d {
			d = w
		}
	}
	return d
}

// Probe is the result of TryConsumeAndReturnRemaining.
type Probe struct {
	// Consumed reports whether the tokens were taken.
	Consumed bool
	// Remaining is the tokens left after the call (before it, when rejected),
	// never below zero: during an overdraft it is 0, as in Bucket4j's
	// ConsumptionProbe, and the debt shows in the waits. AvailableTokens and
	// Diagnostics report the negative balance itself.
	Remaining int64
	// WaitForRefill is, when rejected, how long until the request could
	// succeed, rounded up to the nanosecond; math.MaxInt64 (the largest
	// Duration) means never: the request exceeds a capacity. Zero when
	// consumed. Bucket4j's nanosToWaitForRefill.
	WaitForRefill time.Duration
	// WaitForReset is how long until every bandwidth is full again, zero when
	// it is full now: Diagnostics.TimeToFull at the same instant. Bucket4j's
	// nanosToWaitForReset.
	WaitForReset time.Duration
}

// Estimate is the result of EstimateAbilityToConsume.
type Estimate struct {
	// CanBeConsumed reports whether the tokens are there now.
	CanBeConsumed bool
	// Remaining is the available tokens, never below zero (0 during an
	// overdraft), as in Bucket4j's EstimationProbe.
	Remaining int64
	// WaitForRefill is how long until they would be, rounded up to the
	// nanosecond: zero when they are there now, math.MaxInt64 (the largest
	// Duration) when never, the request exceeding a capacity. Bucket4j's
	// nanosToWaitForRefill.
	WaitForRefill time.Duration
}

// TryConsume takes n tokens at now if every bandwidth has them.
func (b *State) TryConsume(n, now int64) bool {
	b.Refill(now)
	if n > b.available() {
		return false
	}
	b.consume(n)
	return true
}

// TryConsumeAndReturnRemaining is TryConsume with the remaining tokens and
// the waits a caller needs for headers or back-off.
func (b *State) TryConsumeAndReturnRemaining(n, now int64) Probe {
	b.Refill(now)
	avail := b.available()
	if n > avail {
		return Probe{Remaining: max(avail, 0), WaitForRefill: time.Duration(b.delay(n, now, true)),
			WaitForReset: time.Duration(b.TimeToFull(now))}
	}
	b.consume(n)
	return Probe{Consumed: true, Remaining: avail - n, WaitForReset: time.Duration(b.TimeToFull(now))}
}

// EstimateAbilityToConsume reports whether n tokens could be taken at now,
// and when, without taking them.
func (b *State) EstimateAbilityToConsume(n, now int64) Estimate {
	b.Refill(now)
	avail := b.available()
	if n > avail {
		return Estimate{Remaining: max(avail, 0), WaitForRefill: time.Duration(b.delay(n, now, true))}
	}
	return Estimate{CanBeConsumed: true, Remaining: avail}
}

// TryConsumeAsMuchAsPossible takes min(limit, available) tokens and returns
// how many it took. Pass math.MaxInt64 for no limit.
func (b *State) TryConsumeAsMuchAsPossible(limit, now int64) int64 {
	b.Refill(now)
	n := b.available()
	if limit < n {
		n = limit
	}
	if n <= 0 {
		return 0
	}
	b.consume(n)
	return n
}

// AddTokens adds n tokens to every bandwidth, each capped at its capacity.
func (b *State) AddTokens(n, now int64) {
	b.Refill(now)
	for i := range b.Bands {
		s, c := &b.Bands[i], b.Config.Bandwidths[i].Capacity
		if sum := satAdd(s.Size, n); sum >= c {
			s.Size, s.RoundingError = c, 0
		} else {
			s.Size = sum
		}
	}
}

// ForceAddTokens adds n tokens to every bandwidth, even beyond capacity;
// refill pauses while a bandwidth is at or above its capacity. The fraction
// of a token already earned is kept, as Bucket4j keeps it, so it counts again
// once consumption brings the bandwidth below capacity; only a sum beyond
// the int64 range, saturated to math.MaxInt64, drops it.
func (b *State) ForceAddTokens(n, now int64) {
	b.Refill(now)
	for i := range b.Bands {
		s := &b.Bands[i]
		if s.Size > math.MaxInt64-n {
			s.Size, s.RoundingError = math.MaxInt64, 0
			continue
		}
		s.Size += n
	}
}

// ConsumeIgnoringRateLimits takes n tokens even when that overdraws the
// bucket, and returns the nanoseconds until the debt is repaid (zero when no
// debt). When the wait would exceed int64 nanoseconds, or the debt int64
// tokens, it takes nothing and returns math.MaxInt64.
func (b *State) ConsumeIgnoringRateLimits(n, now int64) int64 {
	b.Refill(now)
	d := b.delay(n, now, false)
	if d == math.MaxInt64 || !b.canDebit(n) {
		return math.MaxInt64
	}
	b.consume(n)
	return d
}

// Reserve takes n tokens, possibly into overdraft, if they will be available
// within maxWait nanoseconds, and returns how long the caller must wait
// before using them. It returns math.MaxInt64 and takes nothing when the wait
// exceeds maxWait or n exceeds a capacity. It is the primitive of blocking
// consumption and scheduling.
func (b *State) Reserve(n, maxWait, now int64) int64 {
	b.Refill(now)
	d := b.delay(n, now, true)
	if d == math.MaxInt64 || d > maxWait || !b.canDebit(n) {
		return math.MaxInt64
	}
	b.consume(n)
	return d
}

// Reset fills every bandwidth to capacity.
func (b *State) Reset(now int64) {
	b.Refill(now)
	for i := range b.Bands {
		b.Bands[i].Size, b.Bands[i].RoundingError = b.Config.Bandwidths[i].Capacity, 0
	}
}

// AvailableTokens returns the tokens available at now: the minimum over
// bandwidths, negative during an overdraft.
func (b *State) AvailableTokens(now int64) int64 {
	b.Refill(now)
	return b.available()
}

// Diagnostics describes a bucket for the verbose API.
type Diagnostics struct {
	// State is a copy of the configuration and state after the operation.
	State State
	// Available holds the tokens of each bandwidth.
	Available []int64
	// TimeToFull is how long until every bandwidth is full, zero when full
	// now: Probe.WaitForReset at the same instant.
	TimeToFull time.Duration
}

// Diagnose returns the diagnostics at now.
func (b *State) Diagnose(now int64) Diagnostics {
	b.Refill(now)
	d := Diagnostics{State: b.Clone(), Available: make([]int64, len(b.Bands)), TimeToFull: time.Duration(b.TimeToFull(now))}
	for i := range b.Bands {
		d.Available[i] = b.Bands[i].Size
	}
	return d
}
