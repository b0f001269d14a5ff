package core

import (
	"errors"
	"math"
	"strconv"
	"time"
)

// RefillStyle says how a bandwidth regenerates tokens.
type RefillStyle uint8

const (
	// RefillGreedy adds tokens as soon as it can: 10 tokens per second add one
	// token every 100 ms.
	RefillGreedy RefillStyle = iota
	// RefillIntervally adds the whole refill amount at once, each time a full
	// period has passed since the last refill.
	RefillIntervally
	// RefillIntervallyAligned is RefillIntervally with the period boundaries
	// aligned to Bandwidth.FirstRefill, a wall-clock instant.
	RefillIntervallyAligned
	// RefillIntervallyAlignedAdaptive is RefillIntervallyAligned whose initial
	// tokens are proportional to the time left before the first refill:
	// min(capacity, max(0, capacity-refillTokens) + before*refillTokens/period).
	RefillIntervallyAlignedAdaptive

	numRefillStyles
)

// Valid reports whether s is one of the styles above.
func (s RefillStyle) Valid() bool { return s < numRefillStyles }

// String returns the name of the style in lower case, words joined by
// hyphens ("greedy", "intervally-aligned"), the spelling the Envoy filter's
// configuration accepts; an invalid s reads RefillStyle(n).
func (s RefillStyle) String() string {
	switch s {
	case RefillGreedy:
		return "greedy"
	case RefillIntervally:
		return "intervally"
	case RefillIntervallyAligned:
		return "intervally-aligned"
	case RefillIntervallyAlignedAdaptive:
		return "intervally-aligned-adaptive"
	}
	return "RefillStyle(" + strconv.Itoa(int(s)) + ")"
}

// intervally reports whether tokens arrive in whole-period steps.
func (s RefillStyle) intervally() bool { return s != RefillGreedy }

// aligned reports whether the style needs a wall clock.
func (s RefillStyle) aligned() bool {
	return s == RefillIntervallyAligned || s == RefillIntervallyAlignedAdaptive
}

// Bandwidth is one limit of a bucket: a capacity and a refill rule.
// Build one with Greedy, Intervally, IntervallyAligned or
// IntervallyAlignedAdaptive, then refine it with WithID and WithInitialTokens.
// A Bandwidth is a value; the zero value is invalid.
type Bandwidth struct {
	// ID names the bandwidth for configuration replacement. Empty means none.
	ID string
	// Capacity is the most tokens the bandwidth holds (forced additions aside).
	Capacity int64
	// RefillTokens are added every RefillPeriod.
	RefillTokens int64
	// RefillPeriod is the refill period; at most one token per nanosecond.
	RefillPeriod time.Duration
	// Style is the refill style.
	Style RefillStyle
	// FirstRefill is the Unix time in nanoseconds of the first refill of the
	// aligned styles, at or after the epoch (Validate rejects a negative one
	// with ErrFirstRefill, as Bucket4j rejects an instant before 1970);
	// ignored by the other styles.
	FirstRefill int64
	// InitialTokens is the size of a new bucket when HasInitialTokens is set;
	// otherwise a new bucket starts full (or adaptive, for that style).
	InitialTokens int64
	// HasInitialTokens marks InitialTokens as set.
	HasInitialTokens bool
}

// Greedy returns a bandwidth of the given capacity that regenerates
// refillTokens every period as greedily as it can.
func Greedy(capacity, refillTokens int64, period time.Duration) Bandwidth {
	return Bandwidth{Capacity: capacity, RefillTokens: refillTokens, RefillPeriod: period, Style: RefillGreedy}
}

// Intervally returns a bandwidth that adds refillTokens at once each time a
// whole period has elapsed.
func Intervally(capacity, refillTokens int64, period time.Duration) Bandwidth {
	return Bandwidth{Capacity: capacity, RefillTokens: refillTokens, RefillPeriod: period, Style: RefillIntervally}
}

// IntervallyAligned returns an intervally bandwidth whose first refill
// happens at firstRefill. It needs a wall clock. A firstRefill before the
// epoch, or after 2262-04-11 (beyond int64 Unix nanoseconds), gives a
// bandwidth that Validate rejects with ErrFirstRefill.
func IntervallyAligned(capacity, refillTokens int64, period time.Duration, firstRefill time.Time) Bandwidth {
	return Bandwidth{Capacity: capacity, RefillTokens: refillTokens, RefillPeriod: period,
		Style: RefillIntervallyAligned, FirstRefill: firstRefillNanos(firstRefill)}
}

// IntervallyAlignedAdaptive returns an aligned bandwidth whose initial tokens
// are computed from the time left until firstRefill. It needs a wall clock and
// cannot be combined with WithInitialTokens. firstRefill is checked as by
// IntervallyAligned.
func IntervallyAlignedAdaptive(capacity, refillTokens int64, period time.Duration, firstRefill time.Time) Bandwidth {
	return Bandwidth{Capacity: capacity, RefillTokens: refillTokens, RefillPeriod: period,
		Style: RefillIntervallyAlignedAdaptive, FirstRefill: firstRefillNanos(firstRefill)}
}

// lastUnixNano is the latest instant int64 Unix nanoseconds can express.
var lastUnixNano = time.Unix(0, math.MaxInt64)

// firstRefillNanos returns t in Unix nanoseconds, or -1 (which Validate
// rejects) when t is before the epoch or beyond the int64 range, where
// t.UnixNano would wrap around to an unrelated instant.
func firstRefillNanos(t time.Time) int64 {
	if t.Unix() < 0 || t.After(lastUnixNano) {
		return -1
	}
	return t.UnixNano()
}

// WithID returns a copy of b with the given id.
func (b Bandwidth) WithID(id string) Bandwidth { b.ID = id; return b }

// WithInitialTokens returns a copy of b that starts with n tokens.
func (b Bandwidth) WithInitialTokens(n int64) Bandwidth {
	b.InitialTokens, b.HasInitialTokens = n, true
	return b
}

// Period returns count×unit as a duration, or an error wrapping
// ErrRefillPeriod when either is negative or the product does not fit in
// int64 nanoseconds (about 292 years).
func Period(count int64, unit time.Duration) (time.Duration, error) {
	if count < 0 || unit < 0 || unit != 0 && count > math.MaxInt64/int64(unit) {
		return 0, wrap(ErrRefillPeriod, ": "+strconv.FormatInt(count, 10)+"×"+unit.String())
	}
	return time.Duration(count) * unit, nil
}

// Configuration errors. Validation wraps them in a *ConfigError, so test with
// errors.Is.
var (
	ErrNoBandwidths        = errors.New("configuration has no bandwidth")
	ErrTooManyBandwidths   = errors.New("configuration has more than " + strconv.Itoa(MaxBandwidths) + " bandwidths")
	ErrCapacity            = errors.New("capacity must be positive")
	ErrRefillTokens        = errors.New("refill tokens must be positive")
	ErrRefillPeriod        = errors.New("refill period must be positive and within int64 nanoseconds")
	ErrRefillTooFast       = errors.New("refill faster than 1 token per nanosecond")
	ErrInitialTokens       = errors.New("initial tokens must not be negative")
	ErrDuplicateID         = errors.New("duplicate bandwidth id")
	ErrIDTooLong           = errors.New("bandwidth id longer than " + strconv.Itoa(MaxIDLen) + " bytes")
	ErrAdaptiveWithInitial = errors.New("adaptive initial tokens cannot be combined with explicit initial tokens")
	ErrUnknownRefillStyle  = errors.New("unknown refill style")
	ErrNeedsWallClock      = errors.New("aligned refill needs a wall clock")
	ErrFirstRefill         = errors.New("first refill must lie between the Unix epoch and 2262-04-11T23:47:16Z (int64 Unix nanoseconds)")
)

// Limits on a configuration, so that every record has a bounded size.
const (
	MaxBandwidths = 32
	MaxIDLen      = 255
)

// ConfigError reports why a configuration was rejected. Bandwidth is the
// index of the offending bandwidth, or -1 for the configuration as a whole.
type ConfigError struct {
	Bandwidth int
	Err       error
}

func (e *ConfigError) Error() string {
	if e.Bandwidth < 0 {
		return "bucketgrid: invalid configuration: " + e.Err.Error()
	}
	return "bucketgrid: invalid configuration: bandwidth " + strconv.Itoa(e.Bandwidth) + ": " + errText(e.Err)
}

// Unwrap returns the sentinel error.
func (e *ConfigError) Unwrap() error { return e.Err }

// Validate reports the first reason b cannot be used, or nil.
func (b *Bandwidth) Validate() error {
	switch {
	case !b.Style.Valid():
		return ErrUnknownRefillStyle
	case b.Style.aligned() && b.FirstRefill < 0:
		return wrap(ErrFirstRefill, ": "+strconv.FormatInt(b.FirstRefill, 10)+" ns")
	case b.Capacity <= 0:
		return ErrCapacity
	case b.RefillTokens <= 0:
		return ErrRefillTokens
	case b.RefillPeriod <= 0:
		return ErrRefillPeriod
	case b.RefillTokens > int64(b.RefillPeriod):
		return wrap(ErrRefillTooFast, ": "+strconv.FormatInt(b.RefillTokens, 10)+" tokens per "+b.RefillPeriod.String())
	case b.HasInitialTokens && b.InitialTokens < 0:
		return ErrInitialTokens
	case b.HasInitialTokens && b.Style == RefillIntervallyAlignedAdaptive:
		return ErrAdaptiveWithInitial
	case len(b.ID) > MaxIDLen:
		return ErrIDTooLong
	}
	return nil
}

// Config is a bucket configuration: one or more bandwidths, all of which must
// allow a consumption. The available tokens are the minimum over bandwidths.
type Config struct {
	Bandwidths []Bandwidth
}

// NewConfig returns a validated configuration of the given bandwidths.
func NewConfig(bandwidths ...Bandwidth) (Config, error) {
	c := Config{Bandwidths: bandwidths}
	return c, c.Validate()
}

// Validate reports why c cannot be used, as a *ConfigError, or nil.
func (c *Config) Validate() error {
	if len(c.Bandwidths) == 0 {
		return &ConfigError{-1, ErrNoBandwidths}
	}
	if len(c.Bandwidths) > MaxBandwidths {
		return &ConfigError{-1, ErrTooManyBandwidths}
	}
	for i := range c.Bandwidths {
		b := &c.Bandwidths[i]
		if err := b.Validate(); err != nil {
			return &ConfigError{i, err}
		}
		if b.ID == "" {
			continue
		}
		for j := 0; j < i; j++ {
			if c.Bandwidths[j].ID == b.ID {
				return &ConfigError{i, wrap(ErrDuplicateID, " "+strconv.Quote(b.ID))}
			}
		}
	}
	return nil
}

// ValidateForClock is Validate plus the check that aligned refill styles,
// whose FirstRefill is a wall-clock instant, are only used with a wall clock.
func (c *Config) ValidateForClock(wallClock bool) error {
	if err := c.Validate(); err != nil {
		return err
	}
	if wallClock {
		return nil
	}
	for i := range c.Bandwidths {
		if c.Bandwidths[i].Style.aligned() {
			return &ConfigError{i, ErrNeedsWallClock}
		}
	}
	return nil
}

// Equal reports whether two configurations are identical.
func (c *Config) Equal(o *Config) bool {
	if len(c.Bandwidths) != len(o.Bandwidths) {
		return false
	}
	for i := range c.Bandwidths {
		if c.Bandwidths[i] != o.Bandwidths[i] {
			return false
		}
	}
	return true
}

// Clone returns a deep copy of c.
func (c Config) Clone() Config {
	return Config{Bandwidths: append([]Bandwidth(nil), c.Bandwidths...)}
}
