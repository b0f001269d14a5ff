package wire

import (
	"bytes"
	"encoding/hex"
	"errors"
	"flag"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/internal/harness/randconfig"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden byte vectors in testdata")

// goldenTime is a fixed instant, so the golden vectors never depend on when
// the tests run.
var goldenTime = time.Date(2026, 11, 30, 17, 0, 0, 0, time.UTC)

func goldenConfig() core.Config {
	return core.Config{Bandwidths: []core.Bandwidth{
		core.Greedy(50, 10, time.Second),
		core.Intervally(1000, 100, time.Minute).WithID("business-limit").WithInitialTokens(42),
		core.IntervallyAligned(400, 400, time.Hour, goldenTime).WithID("hourly"),
		core.IntervallyAlignedAdaptive(math.MaxInt64, 1, math.MaxInt64, goldenTime).WithID("extreme"),
	}}
}

func goldenBucket() core.State {
	cfg := goldenConfig()
	b := core.NewState(cfg, goldenTime.Add(-40*time.Minute).UnixNano())
	b.ConfigVersion = 7
	b.ConsumeIgnoringRateLimits(60, goldenTime.Add(-39*time.Minute).UnixNano())
	b.Bands[0].RoundingError = 123_456_789 // a carried fraction of a token
	return b
}

func goldenRequests() map[string]Request {
	cfg := goldenConfig()
	small := core.Config{Bandwidths: []core.Bandwidth{core.Greedy(10, 1, time.Second)}}
	return map[string]Request{
		"request_bare": {Ops: []Op{{Kind: OpTryConsume, Tokens: 1}}},
		"request_create": {
			Mode: ModeCreateIfAbsent, Config: &cfg, ConfigVersion: 3, Verbose: true,
			Expiry: Expiry{Kind: ExpireAfterRefill, Margin: int64(time.Second)},
			Ops:    []Op{{Kind: OpTryConsumeAndReturnRemaining, Tokens: 5}},
		},
		"request_batch": {
			Mode: ModeCreateOrReplace, Config: &small, ConfigVersion: math.MaxInt64, Inheritance: core.InheritAdditive,
			Expiry: Expiry{Kind: ExpireFixed, Fixed: int64(time.Hour)},
			Ops: []Op{
				{Kind: OpTryConsume, Tokens: 1},
				{Kind: OpTryConsumeAndReturnRemaining, Tokens: 2},
				{Kind: OpEstimate, Tokens: 3},
				{Kind: OpTryConsumeAsMuchAsPossible, Tokens: math.MaxInt64},
				{Kind: OpAddTokens, Tokens: 4},
				{Kind: OpForceAddTokens, Tokens: 5},
				{Kind: OpConsumeIgnoringRateLimits, Tokens: 6},
				{Kind: OpReserve, Tokens: 7, MaxWait: int64(time.Minute)},
				{Kind: OpReset},
				{Kind: OpAvailableTokens},
				{Kind: OpReplaceConfiguration, Config: &cfg, Inheritance: core.InheritProportionally},
				{Kind: OpGetConfiguration},
			},
		},
		"request_check_version": {Mode: ModeCheckVersion, ConfigVersion: 2, Ops: []Op{{Kind: OpReset}}},
	}
}

func goldenResponses() map[string]Response {
	b := goldenBucket()
	d := b.Diagnose(goldenTime.UnixNano())
	return map[string]Response{
		"response_ok": {
			Results: []Result{{OK: true, Tokens: 9, Reset: 100_000_000}, {Tokens: -5, Wait: math.MaxInt64, Reset: math.MinInt64}},
			TTL:     int64(time.Minute), Diagnostics: &d,
		},
		"response_not_found":     {Status: StatusNotFound},
		"response_needs_replace": {Status: StatusConfigNeedsReplacing},
		"response_invalid":       {Status: StatusInvalidRequest, Message: "bucketgrid: invalid request: operation 0: token count must be positive"},
		"response_corrupt":       {Status: StatusCorruptState, Message: "bucketgrid: decode bucket at byte 0: unknown format version 9 (this build reads 1)"},
	}
}

// goldenRecords returns every golden record by file name, encoded.
func goldenRecords() map[string][]byte {
	out := map[string][]byte{}
	cfg := goldenConfig()
	out["config"] = AppendConfig(nil, &cfg)
	one := core.Config{Bandwidths: []core.Bandwidth{core.Greedy(1, 1, time.Nanosecond)}}
	out["config_minimal"] = AppendConfig(nil, &one)
	b := goldenBucket()
	out["bucket"] = AppendState(nil, &b)
	fresh := core.NewState(one, 0)
	out["bucket_minimal"] = AppendState(nil, &fresh)
	for name, r := range goldenRequests() {
		out[name] = AppendRequest(nil, &r)
	}
	for name, r := range goldenResponses() {
		out[name] = AppendResponse(nil, &r)
	}
	return out
}

// TestGoldenVectors compares every record's encoding with testdata byte for
// byte, so a change of the wire format can never be silent: it fails until
// FormatVersion is bumped and the vectors are regenerated with
// go test ./core -run TestGoldenVectors -update.
func TestGoldenVectors(t *testing.T) {
	for name, got := range goldenRecords() {
		path := filepath.Join("testdata", name+".bin")
		if *update {
			if err := os.MkdirAll("testdata", 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%s: %v (run with -update to create it)", name, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: encoding changed\n got: %s\nwant: %s", name, hex.EncodeToString(got), hex.EncodeToString(want))
		}
		if want[0] != FormatVersion {
			t.Errorf("%s: golden record starts with version %d, want %d", name, want[0], FormatVersion)
		}
		// the stored bytes decode to the record they were made from
		if err := reencode(want); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// reencode decodes p by its tag and checks that encoding the result gives p
// back.
func reencode(p []byte) error {
	var again []byte
	switch p[1] {
	case tagConfig:
		c, err := DecodeConfig(p)
		if err != nil {
			return err
		}
		again = AppendConfig(nil, &c)
	case tagBucket:
		b, err := DecodeState(p)
		if err != nil {
			return err
		}
		again = AppendState(nil, &b)
	case tagRequest:
		r, err := DecodeRequest(p)
		if err != nil {
			return err
		}
		again = AppendRequest(nil, &r)
	case tagResponse:
		r, err := DecodeResponse(p)
		if err != nil {
			return err
		}
		again = AppendResponse(nil, &r)
	}
	if !bytes.Equal(again, p) {
		return errors.New("decode then encode changed the bytes")
	}
	return nil
}

func TestRoundTripRecords(t *testing.T) {
	cfg := goldenConfig()
	if got, err := DecodeConfig(AppendConfig(nil, &cfg)); err != nil || !reflect.DeepEqual(got, cfg) {
		t.Errorf("config: %+v, %v", got, err)
	}
	b := goldenBucket()
	if got, err := DecodeState(AppendState(nil, &b)); err != nil || !reflect.DeepEqual(got, b) {
		t.Errorf("bucket: %+v, %v", got, err)
	}
	for name, r := range goldenRequests() {
		if got, err := DecodeRequest(AppendRequest(nil, &r)); err != nil || !reflect.DeepEqual(got, r) {
			t.Errorf("%s: %+v, %v", name, got, err)
		}
	}
	for name, r := range goldenResponses() {
		if got, err := DecodeResponse(AppendResponse(nil, &r)); err != nil || !reflect.DeepEqual(got, r) {
			t.Errorf("%s: %+v, %v", name, got, err)
		}
	}
	// random configurations and buckets, including extreme values
	for seed := range 2000 {
		g := randconfig.Gen{R: rand.New(rand.NewPCG(uint64(seed), 0xc0dec))}
		now := g.Int64In(math.MinInt64/2, math.MaxInt64/2)
		cfg := g.Config(now)
		if got, err := DecodeConfig(AppendConfig(nil, &cfg)); err != nil || !reflect.DeepEqual(got, cfg) {
			t.Fatalf("seed %d: config %+v → %+v, %v", seed, cfg, got, err)
		}
		b := core.NewState(cfg, now)
		b.ConfigVersion = g.Pick(0, 1, math.MaxInt64)
		for i := range b.Bands {
			b.Bands[i].Size = g.Pick(math.MinInt64, math.MaxInt64, 0, -1, g.Int64In(math.MinInt64, math.MaxInt64))
			b.Bands[i].LastRefill = g.Int64In(math.MinInt64, math.MaxInt64)
			b.Bands[i].RoundingError = g.Int64In(0, int64(cfg.Bandwidths[i].RefillPeriod)-1)
		}
		if got, err := DecodeState(AppendState(nil, &b)); err != nil || !reflect.DeepEqual(got, b) {
			t.Fatalf("seed %d: bucket %+v → %+v, %v", seed, b, got, err)
		}
	}
}

func TestDecodeErrors(t *testing.T) {
	records := goldenRecords()
	decoders := map[byte]func([]byte) error{
		tagConfig:   func(p []byte) error { _, err := DecodeConfig(p); return err },
		tagBucket:   func(p []byte) error { _, err := DecodeState(p); return err },
		tagRequest:  func(p []byte) error { _, err := DecodeRequest(p); return err },
		tagResponse: func(p []byte) error { _, err := DecodeResponse(p); return err },
	}
	for name, rec := range records {
		decode := decoders[rec[1]]
		// every proper prefix is corrupt, never a panic
		for i := range len(rec) {
			err := decode(rec[:i])
			var de *DecodeError
			if !errors.Is(err, ErrCorrupt) || !errors.As(err, &de) {
				t.Fatalf("%s truncated to %d bytes: %v, want a *DecodeError wrapping ErrCorrupt", name, i, err)
			}
		}
		if err := decode(append(append([]byte(nil), rec...), 0)); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s with a trailing byte: %v", name, err)
		}
		for _, v := range []byte{0, 2, 255} {
			other := append([]byte{v}, rec[1:]...)
			err := decode(other)
			var de *DecodeError
			if !errors.Is(err, ErrUnknownVersion) || !errors.As(err, &de) {
				t.Errorf("%s at format version %d: %v, want ErrUnknownVersion", name, v, err)
			}
		}
		for tag, other := range decoders {
			if tag == rec[1] {
				continue
			}
			if err := other(rec); !errors.Is(err, ErrCorrupt) {
				t.Errorf("%s read as tag %q: %v, want ErrCorrupt", name, tag, err)
			}
		}
	}
	// well-formed bytes of an invalid configuration are corrupt
	bad := core.Config{Bandwidths: []core.Bandwidth{core.Greedy(10, 20, 10)}}
	if _, err := DecodeConfig(AppendConfig(nil, &bad)); !errors.Is(err, ErrCorrupt) || !errors.Is(err, core.ErrRefillTooFast) {
		t.Errorf("invalid configuration: %v", err)
	}
	// a rounding error outside [0, period)
	b := goldenBucket()
	b.Bands[0].RoundingError = int64(b.Config.Bandwidths[0].RefillPeriod)
	if _, err := DecodeState(AppendState(nil, &b)); !errors.Is(err, ErrCorrupt) {
		t.Errorf("rounding error = period: %v", err)
	}
}

// Fuzz targets: every decoder must reject garbage with an error, never
// panic, and whatever it accepts must survive encode → decode → encode
// unchanged. The seed corpus is the golden vectors.

func addGolden(f *testing.F, tag byte) {
	f.Helper()
	for _, rec := range goldenRecords() {
		if rec[1] == tag {
			f.Add(rec)
		}
	}
	f.Add([]byte{})
	f.Add([]byte{FormatVersion, tag})
	f.Add([]byte{FormatVersion + 1, tag, 0})
}

func FuzzDecodeConfig(f *testing.F) {
	addGolden(f, tagConfig)
	f.Fuzz(func(t *testing.T, p []byte) {
		c, err := DecodeConfig(p)
		if err != nil {
			checkDecodeError(t, err)
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("decoded an invalid configuration: %v", err)
		}
		if err := reencode(AppendConfig(nil, &c)); err != nil {
			t.Fatal(err)
		}
	})
}

func FuzzDecodeBucket(f *testing.F) {
	addGolden(f, tagBucket)
	f.Fuzz(func(t *testing.T, p []byte) {
		b, err := DecodeState(p)
		if err != nil {
			checkDecodeError(t, err)
			return
		}
		if err := reencode(AppendState(nil, &b)); err != nil {
			t.Fatal(err)
		}
		// any decodable state survives every operation without panicking
		now := int64(len(p)) * int64(time.Second)
		b.TryConsumeAndReturnRemaining(1, now)
		b.ConsumeIgnoringRateLimits(math.MaxInt64, now)
		b.ForceAddTokens(math.MaxInt64, now)
		b.Diagnose(math.MinInt64)
	})
}

func FuzzDecodeRequest(f *testing.F) {
	addGolden(f, tagRequest)
	f.Fuzz(func(t *testing.T, p []byte) {
		r, err := DecodeRequest(p)
		if err != nil {
			checkDecodeError(t, err)
			return
		}
		if err := reencode(AppendRequest(nil, &r)); err != nil {
			t.Fatal(err)
		}
	})
}

func FuzzDecodeResponse(f *testing.F) {
	addGolden(f, tagResponse)
	f.Fuzz(func(t *testing.T, p []byte) {
		r, err := DecodeResponse(p)
		if err != nil {
			checkDecodeError(t, err)
			return
		}
		if err := reencode(AppendResponse(nil, &r)); err != nil {
			t.Fatal(err)
		}
	})
}

// FuzzProcess runs arbitrary requests against arbitrary stored bytes: no
// panic, corrupt state changes nothing, and whatever is written decodes.
func FuzzProcess(f *testing.F) {
	recs := goldenRecords()
	for _, stored := range [][]byte{nil, recs["bucket"], recs["bucket_minimal"], {1, 'B', 0}} {
		for _, req := range []string{"request_bare", "request_create", "request_batch", "request_check_version"} {
			f.Add(stored, recs[req], int64(0))
			f.Add(stored, recs[req], goldenTime.UnixNano())
		}
	}
	f.Fuzz(func(t *testing.T, stored, reqBytes []byte, now int64) {
		req, err := DecodeRequest(reqBytes)
		if err != nil {
			return
		}
		keep := append([]byte(nil), stored...)
		out, changed, resp := Process(stored, req, now)
		if !bytes.Equal(stored, keep) {
			t.Fatal("Process modified the stored bytes in place")
		}
		switch {
		case resp.Status == StatusCorruptState || resp.Status == StatusInvalidRequest:
			if changed || !bytes.Equal(out, stored) || resp.Err() == nil {
				t.Fatalf("status %v: changed=%v", resp.Status, changed)
			}
		case changed:
			if _, err := DecodeState(out); err != nil {
				t.Fatalf("Process wrote bytes it cannot read: %v", err)
			}
		}
		if _, err := DecodeResponse(AppendResponse(nil, &resp)); err != nil {
			t.Fatalf("response does not round-trip: %v", err)
		}
	})
}

func checkDecodeError(t *testing.T, err error) {
	t.Helper()
	var de *DecodeError
	if !errors.As(err, &de) || !(errors.Is(err, ErrCorrupt) || errors.Is(err, ErrUnknownVersion)) {
		t.Fatalf("decode error %v is not a *DecodeError wrapping ErrCorrupt or ErrUnknownVersion", err)
	}
}
