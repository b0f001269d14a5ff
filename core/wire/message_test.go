package wire

import (
	"errors"
	"github.com/bucketgrid/bucketgrid/core"
	"math"
	"testing"
	"time"
)

// TestErrorMessages pins the text and the wrapping of every error and
// String fallback core builds: callers log these, tests elsewhere match
// them, and core builds them without fmt (it would add a fifth to the Envoy
// filter), so a change in either must be deliberate.
func TestErrorMessages(t *testing.T) {
	at := func(s string) int64 { tm, _ := time.Parse(time.RFC3339, s); return tm.UnixNano() }
	validate := func(bs ...core.Bandwidth) error { c := core.Config{Bandwidths: bs}; return c.Validate() }
	decode := func(p ...byte) error { _, err := DecodeConfig(p); return err }
	decodeBucket := func(p ...byte) error { _, err := DecodeState(p); return err }
	badConfig := AppendConfig(nil, &core.Config{Bandwidths: []core.Bandwidth{core.Greedy(10, 20, 10)}})
	tooMany := make([]core.Bandwidth, core.MaxBandwidths+1)
	for i := range tooMany {
		tooMany[i] = core.Greedy(1, 1, time.Second)
	}
	cfg := &core.Config{Bandwidths: []core.Bandwidth{core.Greedy(1, 1, time.Second)}}
	tests := []struct {
		name string
		err  error
		want string
		is   []error // errors.Is must hold for each
		// wraps are what the cause inside the typed errors (ConfigError,
		// RequestError, DecodeError) wraps, as fmt.Errorf would: one error
		// (Unwrap() error) or two (Unwrap() []error); none when the cause
		// is the sentinel is[0] itself.
		wraps []error
	}{
		{"negative count", periodErr(-1, time.Second),
			"refill period must be positive and within int64 nanoseconds: -1×1s", []error{core.ErrRefillPeriod}, []error{core.ErrRefillPeriod}},
		{"negative unit", periodErr(3, -time.Millisecond),
			"refill period must be positive and within int64 nanoseconds: 3×-1ms", []error{core.ErrRefillPeriod}, []error{core.ErrRefillPeriod}},
		{"period overflow", periodErr(math.MaxInt64, time.Hour),
			"refill period must be positive and within int64 nanoseconds: 9223372036854775807×1h0m0s", []error{core.ErrRefillPeriod}, []error{core.ErrRefillPeriod}},
		{"too many bandwidths", validate(tooMany...),
			"bucketgrid: invalid configuration: configuration has more than 32 bandwidths", []error{core.ErrTooManyBandwidths}, nil},
		{"no bandwidth", validate(),
			"bucketgrid: invalid configuration: configuration has no bandwidth", []error{core.ErrNoBandwidths}, nil},
		{"capacity", validate(core.Greedy(1, 1, time.Second), core.Greedy(0, 1, time.Second)),
			"bucketgrid: invalid configuration: bandwidth 1: capacity must be positive", []error{core.ErrCapacity}, nil},
		{"too fast", validate(core.Greedy(10, 20, 10)),
			"bucketgrid: invalid configuration: bandwidth 0: refill faster than 1 token per nanosecond: 20 tokens per 10ns",
			[]error{core.ErrRefillTooFast}, []error{core.ErrRefillTooFast}},
		{"first refill", validate(core.Bandwidth{Style: core.RefillIntervallyAligned, Capacity: 1, RefillTokens: 1, RefillPeriod: time.Second, FirstRefill: -5}),
			"bucketgrid: invalid configuration: bandwidth 0: first refill must lie between the Unix epoch and 2262-04-11T23:47:16Z (int64 Unix nanoseconds): -5 ns",
			[]error{core.ErrFirstRefill}, []error{core.ErrFirstRefill}},
		{"id too long", validate(core.Greedy(1, 1, time.Second).WithID(string(make([]byte, core.MaxIDLen+1)))),
			"bucketgrid: invalid configuration: bandwidth 0: bandwidth id longer than 255 bytes", []error{core.ErrIDTooLong}, nil},
		{"duplicate id", validate(core.Greedy(1, 1, time.Second).WithID("a\x00é\xff\""), core.Greedy(2, 1, time.Second).WithID("a\x00é\xff\"")),
			`bucketgrid: invalid configuration: bandwidth 1: duplicate bandwidth id "a\x00é\xff\""`, []error{core.ErrDuplicateID}, []error{core.ErrDuplicateID}},
		{"needs wall clock", func() error {
			c := core.Config{Bandwidths: []core.Bandwidth{core.IntervallyAligned(1, 1, time.Second, time.Unix(0, at("2026-01-01T00:00:00Z")))}}
			return c.ValidateForClock(false)
		}(), "bucketgrid: invalid configuration: bandwidth 0: aligned refill needs a wall clock", []error{core.ErrNeedsWallClock}, nil},

		{"too many ops", (&Request{Ops: make([]Op, MaxOps+1)}).Validate(),
			"bucketgrid: invalid request: request has more than 1024 operations", []error{errTooManyOps}, nil},
		{"op tokens", (&Request{Ops: []Op{{Kind: OpTryConsume, Tokens: 1}, {Kind: OpTryConsume}}}).Validate(),
			"bucketgrid: invalid request: operation 1: token count must be positive", []error{errTokens}, nil},
		{"request config", (&Request{Mode: ModeCreateIfAbsent, Config: &core.Config{}, Ops: []Op{{Kind: OpReset}}}).Validate(),
			"bucketgrid: invalid request: bucketgrid: invalid configuration: configuration has no bandwidth",
			[]error{core.ErrNoBandwidths}, nil},
		{"response invalid", (&Response{Status: StatusInvalidRequest, Message: "why"}).Err(),
			"bucketgrid: invalid request: why", []error{ErrInvalidRequest}, []error{ErrInvalidRequest}},
		{"response corrupt", (&Response{Status: StatusCorruptState, Message: "what"}).Err(),
			"bucketgrid: corrupt stored state: what", []error{core.ErrCorruptState}, []error{core.ErrCorruptState}},

		{"short header", decode(FormatVersion),
			"bucketgrid: decode config at byte 0: corrupt record: short header", []error{ErrCorrupt}, []error{ErrCorrupt}},
		{"unknown version", decodeBucket(7, tagBucket),
			"bucketgrid: decode bucket at byte 0: unknown format version 7 (this build reads 1)", []error{ErrUnknownVersion}, []error{ErrUnknownVersion}},
		{"wrong tag", decode(FormatVersion, tagBucket),
			"bucketgrid: decode config at byte 1: corrupt record: tag 'B', want 'C'", []error{ErrCorrupt}, []error{ErrCorrupt}},
		{"unprintable tag", decode(FormatVersion, 0),
			`bucketgrid: decode config at byte 1: corrupt record: tag '\x00', want 'C'`, []error{ErrCorrupt}, []error{ErrCorrupt}},
		{"tag 255", decode(FormatVersion, 255),
			"bucketgrid: decode config at byte 1: corrupt record: tag 'ÿ', want 'C'", []error{ErrCorrupt}, []error{ErrCorrupt}},
		{"truncated", decode(FormatVersion, tagConfig),
			"bucketgrid: decode config at byte 2: corrupt record: bad varint", []error{ErrCorrupt}, []error{ErrCorrupt}},
		{"count", decode(FormatVersion, tagConfig, 40),
			"bucketgrid: decode config at byte 3: corrupt record: count 40 out of range", []error{ErrCorrupt}, []error{ErrCorrupt}},
		{"trailing", decode(append(AppendConfig(nil, cfg), 1, 2, 3)...),
			"bucketgrid: decode config at byte 12: corrupt record: 3 trailing bytes", []error{ErrCorrupt}, []error{ErrCorrupt}},
		{"invalid config", decode(badConfig...),
			"bucketgrid: decode config at byte 8: corrupt record: bucketgrid: invalid configuration: bandwidth 0: refill faster than 1 token per nanosecond: 20 tokens per 10ns",
			[]error{ErrCorrupt, core.ErrRefillTooFast}, []error{ErrCorrupt, core.ErrRefillTooFast}},

		{"key", core.InvalidKey("k", "too long"), "bucketgrid: invalid key " + core.RedactKey("k") + ": too long",
			[]error{core.ErrInvalidKey}, []error{core.ErrInvalidKey}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.err == nil {
				t.Fatal("no error")
			}
			if got := tt.err.Error(); got != tt.want {
				t.Errorf("Error() = %q\nwant      %q", got, tt.want)
			}
			for _, target := range tt.is {
				if !errors.Is(tt.err, target) {
					t.Errorf("errors.Is(err, %q) = false", target)
				}
			}
			cause := tt.err
		unwrap:
			for {
				switch e := cause.(type) {
				case *core.ConfigError:
					cause = e.Err
				case *RequestError:
					cause = e.Err
				case *DecodeError:
					cause = e.Err
				default:
					break unwrap
				}
			}
			var got []error
			multi, isMulti := cause.(interface{ Unwrap() []error })
			switch {
			case isMulti:
				got = multi.Unwrap()
			case errors.Unwrap(cause) != nil:
				got = []error{errors.Unwrap(cause)}
			}
			if len(got) != len(tt.wraps) || isMulti != (len(tt.wraps) == 2) {
				t.Fatalf("%q (%T) wraps %v, want %v", cause, cause, got, tt.wraps)
			}
			for i := range got {
				if !errors.Is(got[i], tt.wraps[i]) {
					t.Errorf("%q wraps %q at %d, want %q", cause, got[i], i, tt.wraps[i])
				}
			}
			if len(tt.wraps) == 0 && cause != tt.is[0] {
				t.Errorf("cause %q is not the sentinel %q", cause, tt.is[0])
			}
		})
	}
}

func periodErr(count int64, unit time.Duration) error {
	_, err := core.Period(count, unit)
	return err
}

func TestStatusFallback(t *testing.T) {
	for s, want := range map[Status]string{7: "Status(7)", StatusCorruptState: "corrupt stored state"} {
		if got := s.String(); got != want {
			t.Errorf("String() = %q, want %q", got, want)
		}
	}
}
