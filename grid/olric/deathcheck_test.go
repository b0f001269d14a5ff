package olric

import (
	"bytes"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// TestStateSyncDeathsNeutralized is a state sync that lists this member
// dead, another member left and a third alive: the transport sets the
// incarnation of the other's death to 0 (memberlist ignores it as old) and
// leaves this member's own death as it came, which memberlist refutes (how
// a split ends), and the alive record untouched, whatever width its
// incarnation's encoding has.
func TestStateSyncDeathsNeutralized(t *testing.T) {
	type header struct {
		Nodes        int  `msgpack:"Nodes"`
		UserStateLen int  `msgpack:"UserStateLen"`
		Join         bool `msgpack:"Join"`
	}
	type state struct {
		Name        string `msgpack:"Name"`
		Incarnation uint32 `msgpack:"Incarnation"`
		State       int    `msgpack:"State"`
	}
	in := []state{
		{Name: "self", Incarnation: 1 << 30, State: 2},
		{Name: "other", Incarnation: 1 << 30, State: 3},
		{Name: "small", Incarnation: 7, State: 1},
		{Name: "wide", Incarnation: 300, State: 2},
		{Name: "alive", Incarnation: 1 << 20, State: 0},
	}
	vals := []any{header{Nodes: len(in)}}
	for _, s := range in {
		vals = append(vals, s)
	}
	plain := []byte{msgPushPull}
	for _, v := range vals {
		b, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		plain = append(plain, b...)
	}
	g := &gossipNet{t: &guard{m: &Member{name: "self"}}}
	out, changed := g.undead(plain)
	if !changed || len(out) != len(plain) {
		t.Fatalf("changed %v, %d bytes from %d", changed, len(out), len(plain))
	}
	dec := msgpack.NewDecoder(bytes.NewReader(out[1:]))
	var h header
	if err := dec.Decode(&h); err != nil || h.Nodes != len(in) {
		t.Fatalf("header %+v: %v", h, err)
	}
	want := map[string]uint32{"self": 1 << 30, "other": 0, "small": 0, "wide": 0, "alive": 1 << 20}
	for range in {
		var s state
		if err := dec.Decode(&s); err != nil {
			t.Fatal(err)
		}
		if s.Incarnation != want[s.Name] {
			t.Errorf("%s (state %d): incarnation %d, want %d", s.Name, s.State, s.Incarnation, want[s.Name])
		}
	}
}
