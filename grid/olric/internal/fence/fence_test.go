package fence

import (
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/core/wire"
)

func config(t *testing.T, capacity int64) core.Config {
	t.Helper()
	cfg, err := core.NewConfig(core.Greedy(capacity, capacity, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestFences: every request that can give the bucket tokens otherwise than
// by refill fences, and none other does.
func TestFences(t *testing.T) {
	cfg, other := config(t, 10), config(t, 20)
	st := core.NewState(cfg, 0)
	stored := wire.AppendState(nil, &st)
	consume := wire.Op{Kind: wire.OpTryConsume, Tokens: 1}
	replace := func(c *core.Config, in core.TokensInheritance) wire.Op {
		return wire.Op{Kind: wire.OpReplaceConfiguration, Config: c, Inheritance: in}
	}
	for _, tc := range []struct {
		name   string
		req    *wire.Request
		stored []byte
		want   bool
	}{
		{"removal", nil, stored, true},
		{"consumption", &wire.Request{Mode: wire.ModeBare, Ops: []wire.Op{consume}}, stored, false},
		{"creation", &wire.Request{Mode: wire.ModeCreateIfAbsent, Config: &cfg, Ops: []wire.Op{consume}}, nil, false},
		{"addition", &wire.Request{Mode: wire.ModeBare, Ops: []wire.Op{{Kind: wire.OpAddTokens, Tokens: 1}}}, stored, true},
		{"forced addition", &wire.Request{Mode: wire.ModeBare, Ops: []wire.Op{{Kind: wire.OpForceAddTokens, Tokens: 1}}}, stored, true},
		{"reset", &wire.Request{Mode: wire.ModeBare, Ops: []wire.Op{{Kind: wire.OpReset}}}, stored, true},
		{"equal replacement", &wire.Request{Mode: wire.ModeBare, Ops: []wire.Op{replace(&cfg, core.InheritAdditive), consume}}, stored, false},
		{"replacement resetting", &wire.Request{Mode: wire.ModeBare, Ops: []wire.Op{replace(&cfg, core.InheritReset)}}, stored, true},
		{"other configuration", &wire.Request{Mode: wire.ModeBare, Ops: []wire.Op{replace(&other, core.InheritAdditive)}}, stored, true},
		{"replacement of an absent bucket", &wire.Request{Mode: wire.ModeBare, Ops: []wire.Op{replace(&other, core.InheritAdditive)}}, nil, false},
		{"replacement of a corrupt bucket", &wire.Request{Mode: wire.ModeBare, Ops: []wire.Op{replace(&cfg, core.InheritAdditive)}}, []byte{0xff}, true},
		{"newer version", &wire.Request{Mode: wire.ModeCreateOrReplace, Config: &cfg, ConfigVersion: 1, Ops: []wire.Op{consume}}, stored, true},
		{"same version", &wire.Request{Mode: wire.ModeCreateOrReplace, Config: &cfg, Ops: []wire.Op{consume}}, stored, false},
	} {
		if got := fences(tc.req, tc.stored); got != tc.want {
			t.Errorf("%s: fences %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestHoldWaitsOutTheEpoch: a new owner of a partition holds a fencing
// request for a Lifetime from its first execution in the epoch (leases
// its predecessor granted may still be in use), and no longer; a
// consumption runs at once.
func TestHoldWaitsOutTheEpoch(t *testing.T) {
	const life = 100
	f := New(life, 16, 4, 1)
	reset := &wire.Request{Mode: wire.ModeBare, Ops: []wire.Op{{Kind: wire.OpReset}}}
	consume := &wire.Request{Mode: wire.ModeBare, Ops: []wire.Op{{Kind: wire.OpTryConsume, Tokens: 1}}}
	var rs Records
	if w, held := f.Hold(rs, "k", 2, 7, 1000, consume, nil); held {
		t.Errorf("a consumption held %d", w)
	}
	if w, held := f.Hold(rs, "k", 2, 7, 1040, reset, nil); !held || w != 60 {
		t.Errorf("a reset 40 into the epoch: held %v for %d, want 60", held, w)
	}
	if w, held := f.Hold(rs, "k", 3, 7, 1040, reset, nil); !held || w != life {
		t.Errorf("a reset in another partition's first execution: held %v for %d, want %d", held, w, life)
	}
	if _, held := f.Hold(rs, "k", 2, 7, 1100, reset, nil); held {
		t.Error("a reset held a Lifetime after the epoch began")
	}
	if w, held := f.Hold(rs, "k", 2, 8, 1100, reset, nil); !held || w != life {
		t.Errorf("a reset in a new epoch: held %v for %d, want %d", held, w, life)
	}
}

// TestHoldWaitsForGrantedLeases: a fencing request waits until the key's
// leases end, blocks grants meanwhile, and changes the key's generation
// when it runs.
func TestHoldWaitsForGrantedLeases(t *testing.T) {
	const life = 100
	f := New(life, 16, 1, 1)
	var rs Records
	f.Hold(rs, "k", 0, 1, 0, nil, nil) // the epoch began at 0
	rec := f.Record(&rs, "k", 500)
	if rec == nil {
		t.Fatal("no record")
	}
	gen := rec.Gen
	rec.LiveUntil = 580
	if w, held := f.Hold(rs, "k", 0, 1, 500, nil, nil); !held || w != 80 {
		t.Fatalf("a removal while a lease lives: held %v for %d, want 80", held, w)
	}
	if rec.Blocked != 580 {
		t.Errorf("grants blocked until %d, want 580", rec.Blocked)
	}
	if rec.Gen != gen {
		t.Error("the generation changed before the fence let the removal run")
	}
	if _, held := f.Hold(rs, "k", 0, 1, 580, nil, nil); held {
		t.Fatal("a removal held after the key's leases ended")
	}
	if rec.Gen == gen {
		t.Error("the removal ran and the generation stayed: old give-backs would count")
	}
}

// TestRecordBound: a stripe keeps at most its share of records; a record
// whose leases all ended makes room, one in use does not.
func TestRecordBound(t *testing.T) {
	f := New(100, 4, 1, 2) // 2 records per stripe
	var rs Records
	a, b := f.Record(&rs, "a", 0), f.Record(&rs, "b", 0)
	if a == nil || b == nil || a.Gen == b.Gen {
		t.Fatalf("records %+v %+v: want two with their own generations", a, b)
	}
	if f.Record(&rs, "a", 0) != a {
		t.Error("a key's record was created anew")
	}
	a.LiveUntil, b.LiveUntil = 200, 300
	if c := f.Record(&rs, "c", 100); c != nil {
		t.Fatalf("a third record while both leases live: %+v", c)
	}
	if c := f.Record(&rs, "c", 250); c == nil || rs["a"] != nil || rs["b"] != b {
		t.Fatalf("at 250: record %+v, %d records, a's %v; want a forgotten for c", c, len(rs), rs["a"])
	}
}
