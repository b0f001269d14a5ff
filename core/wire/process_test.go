package wire

import (
	"bytes"
	"errors"
	"github.com/bucketgrid/bucketgrid/core"
	"math"
	"reflect"
	"slices"
	"testing"
	"time"
)

func procConfig(capacity int64) *core.Config {
	return &core.Config{Bandwidths: []core.Bandwidth{core.Greedy(capacity, capacity, time.Minute).WithID("main")}}
}

// stored returns the bytes of a bucket of capacity, version and tokens at now.
func storedBucket(t *testing.T, capacity, version, tokens, now int64) []byte {
	t.Helper()
	b := core.NewState(*procConfig(capacity), now)
	b.ConfigVersion = version
	b.Bands[0].Size = tokens
	return AppendState(nil, &b)
}

func decodeStored(t *testing.T, p []byte) core.State {
	t.Helper()
	b, err := DecodeState(p)
	if err != nil {
		t.Fatalf("stored bytes: %v", err)
	}
	return b
}

func consume(n int64) []Op { return []Op{{Kind: OpTryConsume, Tokens: n}} }

func TestProcessModes(t *testing.T) {
	const now = int64(1_000_000_000)
	existing := storedBucket(t, 100, 5, 40, now)
	tests := []struct {
		name        string
		stored      []byte
		req         Request
		status      Status
		changed     bool
		ok          bool  // result of the single TryConsume
		wantVersion int64 // of the stored bucket afterwards
		wantCap     int64
		wantTokens  int64
	}{
		{"bare absent", nil, Request{Ops: consume(1)}, StatusNotFound, false, false, -1, 0, 0},
		{"bare existing", existing, Request{Ops: consume(1)}, StatusOK, true, true, 5, 100, 39},
		{"bare existing rejected", existing, Request{Ops: consume(41)}, StatusOK, false, false, 5, 100, 40},
		{"check version absent", nil, Request{Mode: ModeCheckVersion, ConfigVersion: 1, Ops: consume(1)}, StatusNotFound, false, false, -1, 0, 0},
		{"check version older stored", existing, Request{Mode: ModeCheckVersion, ConfigVersion: 6, Ops: consume(1)},
			StatusConfigNeedsReplacing, false, false, 5, 100, 40},
		{"check version equal", existing, Request{Mode: ModeCheckVersion, ConfigVersion: 5, Ops: consume(1)}, StatusOK, true, true, 5, 100, 39},
		{"check version newer stored", existing, Request{Mode: ModeCheckVersion, ConfigVersion: 4, Ops: consume(1)}, StatusOK, true, true, 5, 100, 39},
		{"create absent", nil, Request{Mode: ModeCreateIfAbsent, Config: procConfig(10), ConfigVersion: 3, Ops: consume(4)},
			StatusOK, true, true, 3, 10, 6},
		{"create absent rejected still writes", nil, Request{Mode: ModeCreateIfAbsent, Config: procConfig(10), Ops: consume(11)},
			StatusOK, true, false, 0, 10, 10},
		{"create existing keeps it", existing, Request{Mode: ModeCreateIfAbsent, Config: procConfig(10), ConfigVersion: 9, Ops: consume(1)},
			StatusOK, true, true, 5, 100, 39},
		{"create-or-replace absent", nil, Request{Mode: ModeCreateOrReplace, Config: procConfig(10), ConfigVersion: 3, Ops: consume(1)},
			StatusOK, true, true, 3, 10, 9},
		{"create-or-replace upgrades", existing, Request{Mode: ModeCreateOrReplace, Config: procConfig(200), ConfigVersion: 6,
			Inheritance: core.InheritProportionally, Ops: consume(1)}, StatusOK, true, true, 6, 200, 79},
		{"create-or-replace additive", existing, Request{Mode: ModeCreateOrReplace, Config: procConfig(200), ConfigVersion: 6,
			Inheritance: core.InheritAdditive, Ops: consume(1)}, StatusOK, true, true, 6, 200, 139},
		{"create-or-replace never lowers the version", existing, Request{Mode: ModeCreateOrReplace, Config: procConfig(10),
			ConfigVersion: 4, Ops: consume(1)}, StatusOK, true, true, 5, 100, 39},
		{"create-or-replace same version keeps config", existing, Request{Mode: ModeCreateOrReplace, Config: procConfig(10),
			ConfigVersion: 5, Ops: consume(50)}, StatusOK, false, false, 5, 100, 40},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			keep := append([]byte(nil), tt.stored...)
			out, changed, resp := Process(tt.stored, tt.req, now)
			if resp.Status != tt.status || changed != tt.changed {
				t.Fatalf("status %v changed %v, want %v %v (%s)", resp.Status, changed, tt.status, tt.changed, resp.Message)
			}
			if !bytes.Equal(tt.stored, keep) {
				t.Fatal("Process modified its input")
			}
			if resp.Err() != nil {
				t.Fatalf("Err() = %v for status %v", resp.Err(), resp.Status)
			}
			if tt.status != StatusOK {
				if resp.Results != nil || !bytes.Equal(out, tt.stored) {
					t.Fatalf("non-OK status ran operations or changed the bytes: %+v", resp)
				}
				return
			}
			if len(resp.Results) != 1 || resp.Results[0].OK != tt.ok {
				t.Fatalf("results %+v, want OK=%v", resp.Results, tt.ok)
			}
			if !changed && !bytes.Equal(out, tt.stored) {
				t.Fatal("unchanged but different bytes returned")
			}
			b := decodeStored(t, out)
			if b.ConfigVersion != tt.wantVersion || b.Config.Bandwidths[0].Capacity != tt.wantCap ||
				b.AvailableTokens(now) != tt.wantTokens {
				t.Fatalf("stored version %d capacity %d tokens %d, want %d %d %d", b.ConfigVersion,
					b.Config.Bandwidths[0].Capacity, b.AvailableTokens(now), tt.wantVersion, tt.wantCap, tt.wantTokens)
			}
		})
	}
}

func TestProcessInvalidRequestWritesNothing(t *testing.T) {
	existing := storedBucket(t, 100, 0, 40, 0)
	bad := core.Config{Bandwidths: []core.Bandwidth{core.Greedy(0, 1, time.Second)}}
	tests := []struct {
		name string
		req  Request
		want error
	}{
		{"no ops", Request{}, errNoOps},
		{"too many ops", Request{Ops: make([]Op, MaxOps+1)}, errTooManyOps},
		{"zero tokens", Request{Ops: consume(0)}, errTokens},
		{"negative tokens", Request{Ops: []Op{{Kind: OpAddTokens, Tokens: -1}}}, errTokens},
		{"unknown op", Request{Ops: []Op{{Kind: 200}}}, errUnknownOp},
		{"zero op", Request{Ops: []Op{{}}}, errUnknownOp},
		{"unknown mode", Request{Mode: 9, Ops: consume(1)}, errUnknownMode},
		{"create without config", Request{Mode: ModeCreateIfAbsent, Ops: consume(1)}, errMissingConfig},
		{"create with invalid config", Request{Mode: ModeCreateOrReplace, Config: &bad, Ops: consume(1)}, core.ErrCapacity},
		{"negative version", Request{ConfigVersion: -1, Ops: consume(1)}, errNegativeVersion},
		{"unknown inheritance", Request{Inheritance: 4, Ops: consume(1)}, core.ErrUnknownStrategy},
		{"unknown expiry", Request{Expiry: Expiry{Kind: 3}, Ops: consume(1)}, errExpiry},
		{"fixed expiry of zero", Request{Expiry: Expiry{Kind: ExpireFixed}, Ops: consume(1)}, errExpiry},
		{"negative margin", Request{Expiry: Expiry{Kind: ExpireAfterRefill, Margin: -1}, Ops: consume(1)}, errExpiry},
		{"negative max wait", Request{Ops: []Op{{Kind: OpReserve, Tokens: 1, MaxWait: -1}}}, errNegativeMaxWait},
		{"replace without config", Request{Ops: []Op{{Kind: OpReplaceConfiguration}}}, errMissingConfig},
		{"replace with invalid config", Request{Ops: []Op{{Kind: OpReplaceConfiguration, Config: &bad}}}, core.ErrCapacity},
		{"replace unknown strategy", Request{Ops: []Op{{Kind: OpReplaceConfiguration, Config: procConfig(1), Inheritance: 7}}}, core.ErrUnknownStrategy},
		{"a later op invalid", Request{Ops: []Op{{Kind: OpTryConsume, Tokens: 1}, {Kind: OpTryConsume}}}, errTokens},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, stored := range [][]byte{nil, existing} {
				out, changed, resp := Process(stored, tt.req, 0)
				var re *RequestError
				if resp.Status != StatusInvalidRequest || changed || !bytes.Equal(out, stored) || resp.Results != nil {
					t.Fatalf("status %v changed %v results %v", resp.Status, changed, resp.Results)
				}
				err := resp.Err()
				if !errors.Is(err, ErrInvalidRequest) || resp.Message == "" {
					t.Fatalf("Err() = %v", err)
				}
				if verr := tt.req.Validate(); !errors.Is(verr, tt.want) || !errors.As(verr, &re) {
					t.Fatalf("Validate() = %v, want a *RequestError wrapping %v", verr, tt.want)
				}
			}
		})
	}
}

func TestProcessCorruptState(t *testing.T) {
	good := storedBucket(t, 100, 0, 40, 0)
	newer := append([]byte{FormatVersion + 1}, good[1:]...)
	tests := map[string][]byte{
		"garbage":           []byte("not a bucket"),
		"one byte":          {FormatVersion},
		"truncated":         good[:len(good)-1],
		"trailing":          append(append([]byte(nil), good...), 0),
		"config record":     AppendConfig(nil, procConfig(1)),
		"unknown version":   newer,
		"version zero":      append([]byte{0}, good[1:]...),
		"invalid bandwidth": AppendState(nil, &core.State{Config: core.Config{Bandwidths: []core.Bandwidth{{Capacity: 1}}}, Bands: make([]core.BandState, 1)}),
	}
	req := Request{Mode: ModeCreateOrReplace, Config: procConfig(10), ConfigVersion: 1, Ops: consume(1)}
	for name, stored := range tests {
		t.Run(name, func(t *testing.T) {
			out, changed, resp := Process(stored, req, 0)
			if resp.Status != StatusCorruptState || changed || !bytes.Equal(out, stored) || resp.Results != nil {
				t.Fatalf("status %v changed %v", resp.Status, changed)
			}
			if !errors.Is(resp.Err(), core.ErrCorruptState) {
				t.Fatalf("Err() = %v", resp.Err())
			}
		})
	}
	// the unknown version is a typed error at the decoder
	_, err := DecodeState(newer)
	var de *DecodeError
	if !errors.Is(err, ErrUnknownVersion) || !errors.As(err, &de) || de.Record != "bucket" {
		t.Fatalf("DecodeState(version %d) = %v, want a *DecodeError wrapping ErrUnknownVersion", FormatVersion+1, err)
	}
}

// TestProcessReconstruct: ModeReconstruct writes a new bucket over bytes
// that do not decode, and only over those: a valid bucket is used as
// ModeCreateOrReplace uses it, and a record of a newer format is left alone.
func TestProcessReconstruct(t *testing.T) {
	const now = int64(1_000_000_000)
	good := storedBucket(t, 100, 5, 40, now)
	newer := append([]byte{FormatVersion + 1}, good[1:]...)
	req := Request{Mode: ModeReconstruct, Config: procConfig(10), ConfigVersion: 3, Ops: consume(1)}
	for name, stored := range map[string][]byte{
		"garbage":           []byte("not a bucket"),
		"truncated":         good[:len(good)-1],
		"one byte":          {FormatVersion},
		"version 9 garbage": []byte{9, 0, 1},
	} {
		t.Run(name, func(t *testing.T) {
			out, changed, resp := Process(stored, req, now)
			if resp.Status != StatusOK || !changed || len(resp.Results) != 1 || !resp.Results[0].OK {
				t.Fatalf("status %v changed %v results %+v (%s)", resp.Status, changed, resp.Results, resp.Message)
			}
			b := decodeStored(t, out)
			if b.ConfigVersion != 3 || b.Config.Bandwidths[0].Capacity != 10 || b.AvailableTokens(now) != 9 {
				t.Fatalf("new bucket: version %d capacity %d tokens %d, want 3 10 9", b.ConfigVersion,
					b.Config.Bandwidths[0].Capacity, b.AvailableTokens(now))
			}
		})
	}
	t.Run("valid bucket kept", func(t *testing.T) {
		out, _, resp := Process(good, Request{Mode: ModeReconstruct, Config: procConfig(10), ConfigVersion: 5, Ops: consume(1)}, now)
		if b := decodeStored(t, out); resp.Status != StatusOK || b.Config.Bandwidths[0].Capacity != 100 || b.AvailableTokens(now) != 39 {
			t.Fatalf("status %v: a valid bucket was replaced", resp.Status)
		}
	})
	t.Run("valid older version replaced as create-or-replace", func(t *testing.T) {
		out, _, _ := Process(good, Request{Mode: ModeReconstruct, Config: procConfig(200), ConfigVersion: 6,
			Inheritance: core.InheritProportionally, Ops: consume(1)}, now)
		if b := decodeStored(t, out); b.ConfigVersion != 6 || b.Config.Bandwidths[0].Capacity != 200 {
			t.Fatalf("version %d capacity %d, want 6 200", b.ConfigVersion, b.Config.Bandwidths[0].Capacity)
		}
	})
	t.Run("unknown version left alone", func(t *testing.T) {
		out, changed, resp := Process(newer, req, now)
		if resp.Status != StatusCorruptState || changed || !bytes.Equal(out, newer) {
			t.Fatalf("status %v changed %v: a newer format's record must not be overwritten", resp.Status, changed)
		}
	})
	t.Run("needs a configuration", func(t *testing.T) {
		if err := (&Request{Mode: ModeReconstruct, Ops: consume(1)}).Validate(); !errors.Is(err, errMissingConfig) {
			t.Fatalf("Validate() = %v, want errMissingConfig", err)
		}
	})
}

// A bucket that starts above its capacity is never expired by
// ExpireAfterRefill: re-created, it would hand out the surplus again.
func TestProcessTTLInitialAboveCapacity(t *testing.T) {
	cfg := &core.Config{Bandwidths: []core.Bandwidth{core.Greedy(10, 10, time.Minute).WithInitialTokens(50)}}
	_, changed, resp := Process(nil, Request{Mode: ModeCreateIfAbsent, Config: cfg,
		Expiry: Expiry{Kind: ExpireAfterRefill, Margin: int64(time.Second)}, Ops: consume(1)}, 0)
	if !changed || resp.TTL != 0 {
		t.Fatalf("changed %v TTL %v, want no TTL", changed, time.Duration(resp.TTL))
	}
	within := &core.Config{Bandwidths: []core.Bandwidth{core.Greedy(10, 10, time.Minute).WithInitialTokens(10)}}
	if _, _, resp := Process(nil, Request{Mode: ModeCreateIfAbsent, Config: within,
		Expiry: Expiry{Kind: ExpireAfterRefill, Margin: int64(time.Second)}, Ops: consume(1)}, 0); resp.TTL != int64(7*time.Second) {
		t.Fatalf("initial tokens at capacity: TTL %v, want 7s", time.Duration(resp.TTL))
	}
}

func TestProcessBatch(t *testing.T) {
	const now = int64(0)
	stored := storedBucket(t, 10, 0, 10, now)
	req := Request{Verbose: true, Ops: []Op{
		{Kind: OpTryConsume, Tokens: 4},                    // 6 left
		{Kind: OpTryConsumeAndReturnRemaining, Tokens: 10}, // rejected
		{Kind: OpEstimate, Tokens: 6},                      // can
		{Kind: OpTryConsumeAsMuchAsPossible, Tokens: 5},    // takes 5, 1 left
		{Kind: OpAddTokens, Tokens: 2},                     // 3
		{Kind: OpForceAddTokens, Tokens: 10},               // 13
		{Kind: OpConsumeIgnoringRateLimits, Tokens: 20},    // -7: 7 to repay at 10/min
		{Kind: OpReserve, Tokens: 1, MaxWait: 0},           // refused
		{Kind: OpAvailableTokens},
		{Kind: OpReset},
		{Kind: OpReplaceConfiguration, Config: procConfig(20), Inheritance: core.InheritAsIs},
		{Kind: OpAvailableTokens},
		{Kind: OpGetConfiguration},
	}}
	out, changed, resp := Process(stored, req, now)
	if resp.Status != StatusOK || !changed {
		t.Fatalf("status %v changed %v", resp.Status, changed)
	}
	perToken := int64(time.Minute) / 10
	want := []Result{
		{OK: true},
		{Tokens: 6, Wait: 4 * perToken, Reset: 4 * perToken},
		{OK: true, Tokens: 6},
		{OK: true, Tokens: 5},
		{OK: true},
		{OK: true},
		{OK: true, Wait: 7 * perToken},    // the debt of 7
		{Tokens: 10, Wait: math.MaxInt64}, // refused; Tokens: the capacity
		{OK: true, Tokens: -7},
		{OK: true},
		{OK: true},
		{OK: true, Tokens: 10},
		{OK: true},
	}
	if !reflect.DeepEqual(resp.Results, want) {
		t.Fatalf("results\n got %+v\nwant %+v", resp.Results, want)
	}
	b := decodeStored(t, out)
	if b.Config.Bandwidths[0].Capacity != 20 || b.ConfigVersion != 0 {
		t.Fatal("OpReplaceConfiguration must replace the configuration and leave the version alone")
	}
	if resp.Diagnostics == nil || resp.Diagnostics.Available[0] != 10 || resp.Diagnostics.TimeToFull != 10*time.Minute/20 {
		t.Fatalf("diagnostics %+v", resp.Diagnostics)
	}

	// read-only batches write nothing and return the very same bytes
	ro := Request{Ops: []Op{{Kind: OpAvailableTokens}, {Kind: OpEstimate, Tokens: 100}, {Kind: OpGetConfiguration},
		{Kind: OpTryConsume, Tokens: 11}, {Kind: OpTryConsumeAsMuchAsPossible, Tokens: 1}}}
	empty := storedBucket(t, 10, 0, 0, now)
	out, changed, resp = Process(empty, ro, now)
	if changed || &out[0] != &empty[0] || resp.Diagnostics == nil {
		t.Fatalf("read-only batch: changed %v, diagnostics %v", changed, resp.Diagnostics != nil)
	}
}

func TestProcessTTL(t *testing.T) {
	const now = int64(0)
	stored := storedBucket(t, 10, 0, 10, now) // 10 per minute: 6 s per token
	tests := []struct {
		name   string
		expiry Expiry
		ops    []Op
		want   int64
	}{
		{"never", Expiry{}, consume(5), 0},
		{"fixed", Expiry{Kind: ExpireFixed, Fixed: int64(time.Hour)}, consume(5), int64(time.Hour)},
		{"fixed below the minimum", Expiry{Kind: ExpireFixed, Fixed: 1}, consume(5), MinTTL},
		{"after refill", Expiry{Kind: ExpireAfterRefill, Margin: int64(time.Second)}, consume(5), 30*int64(time.Second) + int64(time.Second)},
		{"after refill, full", Expiry{Kind: ExpireAfterRefill, Margin: int64(time.Second)}, []Op{{Kind: OpReset}}, int64(time.Second)},
		{"after refill, full, no margin", Expiry{Kind: ExpireAfterRefill}, []Op{{Kind: OpReset}}, MinTTL},
		{"after refill, saturated margin", Expiry{Kind: ExpireAfterRefill, Margin: math.MaxInt64}, consume(1), math.MaxInt64},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, changed, resp := Process(stored, Request{Expiry: tt.expiry, Ops: tt.ops}, now)
			if !changed || resp.TTL != tt.want {
				t.Fatalf("changed %v TTL %d, want %d", changed, resp.TTL, tt.want)
			}
		})
	}
	// a bucket whose refill to full lies beyond int64 nanoseconds has no TTL
	b := core.NewState(core.Config{Bandwidths: []core.Bandwidth{core.Greedy(2, 1, math.MaxInt64/2)}}, now)
	stuck := AppendState(nil, &b)
	_, changed, resp := Process(stuck, Request{Expiry: Expiry{Kind: ExpireAfterRefill}, Ops: []Op{
		{Kind: OpConsumeIgnoringRateLimits, Tokens: 2}, {Kind: OpConsumeIgnoringRateLimits, Tokens: 1}}}, now)
	if !changed || !resp.Results[1].OK || resp.TTL != 0 {
		t.Fatalf("stuck bucket: changed %v results %+v TTL %d, want no TTL", changed, resp.Results, resp.TTL)
	}
}

func TestProcessDoesNotAliasRequestConfig(t *testing.T) {
	cfg := procConfig(10)
	out, _, _ := Process(nil, Request{Mode: ModeCreateIfAbsent, Config: cfg, Ops: consume(1)}, 0)
	cfg.Bandwidths[0].Capacity = 999
	if b := decodeStored(t, out); b.Config.Bandwidths[0].Capacity != 10 {
		t.Fatal("the stored bucket follows the caller's later edit of the request")
	}
}

func TestStatusStrings(t *testing.T) {
	for s := StatusOK; s <= numStatuses; s++ {
		if s.String() == "" {
			t.Errorf("status %d has no name", s)
		}
	}
}

// TestReplaceBySameConfig: replacing a configuration by an equal one
// writes nothing and changes nothing, unless a bandwidth holds forced
// tokens above its capacity (which a replacement caps) or the strategy is
// reset, or the bandwidths cannot take over from themselves (several
// without an ID, which a replacement starts afresh).
func TestReplaceBySameConfig(t *testing.T) {
	named := core.Config{Bandwidths: []core.Bandwidth{core.Greedy(10, 10, time.Second).WithID("a"),
		core.IntervallyAligned(100, 100, time.Minute, time.Unix(0, 0)).WithID("b")}}
	anonymous := core.Config{Bandwidths: []core.Bandwidth{core.Greedy(10, 10, time.Second), core.Greedy(100, 100, time.Minute)}}
	one := core.Config{Bandwidths: []core.Bandwidth{core.IntervallyAligned(100, 100, time.Minute, time.Unix(0, 0))}}
	for _, tc := range []struct {
		name    string
		cfg     core.Config
		force   bool
		inherit core.TokensInheritance
		changed bool
	}{
		{"as-is", named, false, core.InheritAsIs, false},
		{"additive", named, false, core.InheritAdditive, false},
		{"proportionally", named, false, core.InheritProportionally, false},
		{"one anonymous bandwidth", one, false, core.InheritAdditive, false},
		{"reset", named, false, core.InheritReset, true},
		{"forced tokens", named, true, core.InheritAdditive, true},
		{"several anonymous bandwidths", anonymous, false, core.InheritAsIs, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			create := Request{Mode: ModeCreateIfAbsent, Config: &cfg, Ops: []Op{{Kind: OpTryConsume, Tokens: 3}}}
			stored, _, _ := Process(nil, create, 1e9)
			from := stored
			if tc.force {
				from, _, _ = Process(stored, Request{Ops: []Op{{Kind: OpForceAddTokens, Tokens: 50}}}, 1e9)
			}
			now := int64(1e9 + 12345)
			req := Request{Ops: []Op{{Kind: OpReplaceConfiguration, Config: &cfg, Inheritance: tc.inherit},
				{Kind: OpGetConfiguration}}}
			_, changed, resp := Process(from, req, now)
			if changed != tc.changed {
				t.Fatalf("changed %v, want %v", changed, tc.changed)
			}
			if tc.changed {
				return
			}
			b, err := DecodeState(from)
			if err != nil {
				t.Fatal(err)
			}
			b.Refill(now)
			if !resp.Diagnostics.State.Config.Equal(&b.Config) || !slices.Equal(resp.Diagnostics.State.Bands, b.Bands) {
				t.Fatalf("state %+v, want the refilled %+v", resp.Diagnostics.State.Bands, b.Bands)
			}
			// and exactly what a full replacement leaves
			b.ReplaceConfiguration(cfg.Clone(), tc.inherit, now)
			if !slices.Equal(resp.Diagnostics.State.Bands, b.Bands) {
				t.Fatalf("state %+v, want the replaced %+v", resp.Diagnostics.State.Bands, b.Bands)
			}
		})
	}
}
