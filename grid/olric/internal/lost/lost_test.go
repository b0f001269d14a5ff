package lost

import (
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
		stored := EmptySince(&req, tc.lostAt, tc.now)
		_, _, resp := wire.Process(stored, req, tc.now)
		if resp.Status != wire.StatusOK || resp.Results[0].Tokens != tc.want {
			t.Errorf("%s: %v %d tokens, want %d", tc.name, resp.Status, resp.Results[0].Tokens, tc.want)
		}
		if b, err := wire.DecodeState(stored); err != nil || b.ConfigVersion != 7 {
			t.Errorf("%s: state %+v, %v: want configuration version 7", tc.name, b, err)
		}
	}
}

// TestTakeover: a partition is lost only when every member that held its
// data is gone from the new read and the taker was none of them.
func TestTakeover(t *testing.T) {
	present := map[string]struct{}{"b": {}, "c": {}}
	for _, tc := range []struct {
		name string
		self string
		prev string
		want bool
	}{
		{"the only holder gone", "b", "a", true},
		{"every holder gone", "b", "a,d", true},
		{"a backup still present", "b", "a,c", false},
		{"the taker held it", "b", "a,b", false},
		{"a cluster still forming", "b", "", false},
	} {
		if got := Takeover(tc.self, tc.prev, present); got != tc.want {
			t.Errorf("%s: Takeover(%q, %q) = %v, want %v", tc.name, tc.self, tc.prev, got, tc.want)
		}
	}
}

// TestLatestGone: a partition whose latest owner left with every backup is
// lost, though a living older previous owner is still listed; one whose
// owner left a backup is not.
func TestLatestGone(t *testing.T) {
	present := map[string]struct{}{"b": {}, "c": {}}
	for _, tc := range []struct {
		name                  string
		self, owner, replicas string
		want                  bool
	}{
		{"the owner gone, no backup", "b", "a", "", true},
		{"the owner gone, its backup gone", "b", "a", "d", true},
		{"the owner gone, a backup present", "b", "a", "c", false},
		{"the taker was its backup", "b", "a", "b", false},
		{"the owner still present", "b", "c", "", false},
		{"the taker owned it", "b", "b", "", false},
		{"no owner read", "b", "", "", false},
	} {
		if got := LatestGone(tc.self, tc.owner, tc.replicas, present); got != tc.want {
			t.Errorf("%s: LatestGone(%q, %q, %q) = %v, want %v", tc.name, tc.self, tc.owner, tc.replicas, got, tc.want)
		}
	}
}

// TestOrphaned: a partition its owner read through previous owners is lost
// once every other holder left; one it owned alone is not, whatever its
// backups do.
func TestOrphaned(t *testing.T) {
	present := map[string]struct{}{"b": {}, "c": {}}
	for _, tc := range []struct {
		name            string
		owners, holders string
		want            bool
	}{
		{"the previous owner left", "a,b", "a,b", true},
		{"the previous owner and its backup left", "a,b", "a,b,d", true},
		{"the previous owner moved its data and lives", "c,b", "c,b", false},
		{"the previous owner left, a backup remains", "a,b", "a,b,c", false},
		{"no previous owner, the backup died", "b", "b,d", false},
	} {
		if got := Orphaned("b", tc.owners, tc.holders, present); got != tc.want {
			t.Errorf("%s: Orphaned(b, %q, %q) = %v, want %v", tc.name, tc.owners, tc.holders, got, tc.want)
		}
	}
}

// TestCreates: only a request that would create an absent bucket, with a
// configuration, starts from EmptySince.
func TestCreates(t *testing.T) {
	cfg, _ := core.NewConfig(core.Greedy(20, 20, time.Minute))
	for _, tc := range []struct {
		req  wire.Request
		want bool
	}{
		{wire.Request{Mode: wire.ModeCreateIfAbsent, Config: &cfg}, true},
		{wire.Request{Mode: wire.ModeCreateOrReplace, Config: &cfg}, true},
		{wire.Request{Mode: wire.ModeReconstruct, Config: &cfg}, true},
		{wire.Request{Mode: wire.ModeBare}, false},
		{wire.Request{Mode: wire.ModeCreateIfAbsent}, false},
	} {
		if got := Creates(&tc.req); got != tc.want {
			t.Errorf("mode %v, config %v: Creates %v, want %v", tc.req.Mode, tc.req.Config != nil, got, tc.want)
		}
	}
}

// TestSince: a partition is lost from the read whose new owner can read
// none of its latest state, or whose owner's previous owners all left;
// a living member handing it on carries the loss along, and a dead
// previous owner Olric keeps listing loses it only once.
func TestSince(t *testing.T) {
	prevPresent := map[string]struct{}{"a": {}, "b": {}, "c": {}}
	present := map[string]struct{}{"b": {}, "c": {}}
	const at, now = 5, 9
	for _, tc := range []struct {
		name        string
		prev, next  Part
		at          int64
		prevPresent map[string]struct{}
		want        int64
	}{
		{"taken from a killed owner", Part{"a", ""}, Part{"b", ""}, 0, prevPresent, now},
		{"taken from a killed owner and its backup", Part{"a", "d"}, Part{"b", ""}, 0, prevPresent, now},
		{"taken from a killed owner, a backup present", Part{"a", "c"}, Part{"b", ""}, 0, prevPresent, 0},
		{"handed on by a living owner", Part{"c", ""}, Part{"c,b", ""}, 0, prevPresent, 0},
		{"handed on by a living owner that lost it", Part{"c", ""}, Part{"c,b", ""}, at, prevPresent, at},
		{"handed on before its data moved", Part{"c", ""}, Part{"b", ""}, at, prevPresent, at},
		{"kept by its owner", Part{"b", ""}, Part{"b", ""}, at, prevPresent, at},
		{"its owner's previous owner left", Part{"a,b", ""}, Part{"a,b", ""}, 0, prevPresent, now},
		{"its owner's previous owner left, after an older loss", Part{"a,b", ""}, Part{"a,b", ""}, at, prevPresent, now},
		{"its owner's previous owner left before", Part{"a,b", ""}, Part{"a,b", ""}, at, present, at},
		{"its owner's previous owner lives", Part{"c,b", ""}, Part{"c,b", ""}, 0, prevPresent, 0},
		{"no owner read", Part{"a", ""}, Part{"", ""}, at, prevPresent, at},
		{"a cluster forming", Part{"", ""}, Part{"b", ""}, 0, nil, 0},
	} {
		if got := Since(tc.prev, tc.next, tc.at, tc.prevPresent, present, now); got != tc.want {
			t.Errorf("%s: Since(%+v, %+v, %d) = %d, want %d", tc.name, tc.prev, tc.next, tc.at, got, tc.want)
		}
	}
}

// TestWatched: an owner change that leaves its previous holders listed
// nowhere while they are present is watched, and the partition is lost
// when they have all left within the window; a holder still listed, the
// new owner among the previous holders, or a watch past its window is
// not.
func TestWatched(t *testing.T) {
	all := map[string]struct{}{"a": {}, "b": {}, "c": {}}
	present := map[string]struct{}{"b": {}, "c": {}}
	const now, window = 9, 3
	for _, tc := range []struct {
		name       string
		prev, next Part
		w          Watch
		present    map[string]struct{}
		want       Watch
		lost       bool
	}{
		{"moved while its holder is present", Part{"a", ""}, Part{"b", ""}, Watch{}, all, Watch{"a", now}, false},
		{"moved from a holder and a backup", Part{"a", "c"}, Part{"b", ""}, Watch{}, all, Watch{"a,c", now}, false},
		{"moved, its backup listed", Part{"a", "c"}, Part{"b", "c"}, Watch{}, all, Watch{}, false},
		{"moved, its previous owner listed", Part{"a", ""}, Part{"a,b", ""}, Watch{}, all, Watch{}, false},
		{"moved to its backup", Part{"a", "b"}, Part{"b", ""}, Watch{}, all, Watch{}, false},
		{"the watched holder left", Part{"b", ""}, Part{"b", ""}, Watch{"a", 7}, present, Watch{}, true},
		{"one watched holder of two left", Part{"b", ""}, Part{"b", ""}, Watch{"a,c", 7}, present, Watch{"a,c", 7}, false},
		{"the watched holder left too late", Part{"b", ""}, Part{"b", ""}, Watch{"a", 5}, present, Watch{}, false},
		{"a clock stepped back", Part{"b", ""}, Part{"b", ""}, Watch{"a", 12}, present, Watch{}, false},
		{"handed on, listed, the watch passes along", Part{"b", ""}, Part{"b,c", ""}, Watch{"a", 7}, all, Watch{"a", 7}, false},
		{"handed on, then the watched holder left", Part{"b", ""}, Part{"b,c", ""}, Watch{"a", 7}, present, Watch{}, true},
		{"no owner read", Part{"b", ""}, Part{"", ""}, Watch{"a", 7}, present, Watch{"a", 7}, false},
		{"a cluster forming", Part{"", ""}, Part{"b", ""}, Watch{}, all, Watch{}, false},
	} {
		w, lost := Watched(tc.prev, tc.next, tc.w, tc.present, now, window)
		if w != tc.want || lost != tc.lost {
			t.Errorf("%s: Watched(%+v, %+v, %+v) = %+v, %v, want %+v, %v", tc.name, tc.prev, tc.next, tc.w, w, lost, tc.want, tc.lost)
		}
	}
}
