package olric

import (
	"errors"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/core/wire"
)

// TestEmptySince checks the state a lost bucket starts from: empty at the
// takeover and refilled by core since, to the token, for a greedy and an
// aligned intervally refilled bandwidth; a takeover long ago gives a full
// bucket, and a takeover instant after now (a clock stepped back) an
// empty one.
func TestEmptySince(t *testing.T) {
	const sec = int64(time.Second)
	greedy, _ := core.NewConfig(core.Greedy(20, 20, time.Minute))
	aligned, _ := core.NewConfig(core.IntervallyAligned(10, 10, time.Minute, time.Unix(0, 0)))
	for _, tc := range []struct {
		name        string
		cfg         *core.Config
		lostAt, now int64
		want        int64
	}{
		{"greedy, 9 s later", &greedy, 100 * sec, 109 * sec, 3},
		{"greedy, an hour later", &greedy, 100 * sec, 3700 * sec, 20},
		{"greedy, clock stepped back", &greedy, 100 * sec, 90 * sec, 0},
		{"aligned, before the boundary", &aligned, 61 * sec, 119 * sec, 0},
		{"aligned, after the boundary", &aligned, 61 * sec, 120 * sec, 10},
	} {
		req := wire.Request{Mode: wire.ModeCreateIfAbsent, Config: tc.cfg, ConfigVersion: 7, Ops: []wire.Op{{Kind: wire.OpAvailableTokens}}}
		stored := emptySince(&req, tc.lostAt, tc.now)
		_, _, resp := wire.Process(stored, req, tc.now)
		if resp.Status != wire.StatusOK || resp.Results[0].Tokens != tc.want {
			t.Errorf("%s: %v %d tokens, want %d", tc.name, resp.Status, resp.Results[0].Tokens, tc.want)
		}
		if b, err := wire.DecodeState(stored); err != nil || b.ConfigVersion != 7 {
			t.Errorf("%s: state %+v, %v: want configuration version 7", tc.name, b, err)
		}
	}
}

// TestLostStateInvalid: a LostState that is none of the constants fails
// Start before anything starts.
func TestLostStateInvalid(t *testing.T) {
	c := DefaultLocalConfig()
	c.LostState = LostState(7)
	if _, err := c.withDefaults(); !errors.Is(err, ErrLostState) {
		t.Fatalf("withDefaults: %v, want ErrLostState", err)
	}
}
