package wire

import (
	"reflect"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/core"
)

// TestDecodeAllocations bounds the garbage an owner makes decoding what
// every check of a rule brings it (a request carrying its one-bandwidth
// configuration, twice: eager creation and the rule's replacement) and the
// state it reads: a configuration and its bandwidths are one allocation,
// a state's bandwidths and band states one more. What is decoded is
// unchanged.
func TestDecodeAllocations(t *testing.T) {
	cfg := core.Config{Bandwidths: []core.Bandwidth{core.Greedy(10, 1, time.Second)}}
	req := Request{Mode: ModeCreateIfAbsent, Config: &cfg, Ops: []Op{
		{Kind: OpReplaceConfiguration, Config: &cfg, Inheritance: core.InheritAdditive},
		{Kind: OpTryConsumeAsMuchAsPossible, Tokens: 1}}}
	rec := AppendRequest(nil, &req)
	var got Request
	if n := testing.AllocsPerRun(100, func() {
		var err error
		if got, err = DecodeRequest(rec); err != nil {
			t.Fatal(err)
		}
	}); n > 3 {
		t.Errorf("DecodeRequest: %v allocations, want at most 3 (two configurations, the operations)", n)
	}
	if !reflect.DeepEqual(got, req) {
		t.Fatalf("decoded %+v, want %+v", got, req)
	}
	st := core.NewState(cfg, 0)
	st.Bands[0].Size = 3
	srec := AppendState(nil, &st)
	var gotState core.State
	if n := testing.AllocsPerRun(100, func() {
		var err error
		if gotState, err = DecodeState(srec); err != nil {
			t.Fatal(err)
		}
	}); n > 1 {
		t.Errorf("DecodeState: %v allocations, want at most 1", n)
	}
	if !reflect.DeepEqual(gotState, st) {
		t.Fatalf("decoded %+v, want %+v", gotState, st)
	}
}
