package trust

import (
	"bufio"
	"bytes"
	"errors"
	"testing"

	"github.com/bucketgrid/bucketgrid/grid/olric/internal/frame"
)

// TestMACBindsEverything is a relay: a proof made for one connection,
// asker, answerer, nonce, record or flags is worthless for any other, and
// a node without the password cannot make it.
func TestMACBindsEverything(t *testing.T) {
	var nonce [NonceLen]byte
	r := Record{Meta: "meta", Addr: "10.0.0.1:3322"}
	base := MAC("pw", []byte("binding"), "asker", "answerer", nonce, r, ProofFlagPw)
	other := nonce
	other[0] = 1
	for name, mac := range map[string][]byte{
		"password": MAC("pw2", []byte("binding"), "asker", "answerer", nonce, r, ProofFlagPw),
		"binding":  MAC("pw", []byte("binding2"), "asker", "answerer", nonce, r, ProofFlagPw),
		"asker":    MAC("pw", []byte("binding"), "asker2", "answerer", nonce, r, ProofFlagPw),
		"answerer": MAC("pw", []byte("binding"), "asker", "answerer2", nonce, r, ProofFlagPw),
		"nonce":    MAC("pw", []byte("binding"), "asker", "answerer", other, r, ProofFlagPw),
		"meta":     MAC("pw", []byte("binding"), "asker", "answerer", nonce, Record{Meta: "meta2", Addr: r.Addr}, ProofFlagPw),
		"addr":     MAC("pw", []byte("binding"), "asker", "answerer", nonce, Record{Meta: r.Meta, Addr: "10.0.0.2:3322"}, ProofFlagPw),
		"flags":    MAC("pw", []byte("binding"), "asker", "answerer", nonce, r, ProofFlagPw|ProofFlagGossip),
		// fields are length-prefixed: moving a byte across a boundary changes the proof
		"boundary": MAC("pw", []byte("binding"), "aske", "ranswerer", nonce, r, ProofFlagPw),
	} {
		if bytes.Equal(mac, base) {
			t.Errorf("changing the %s leaves the proof valid", name)
		}
	}
	if !bytes.Equal(base, MAC("pw", []byte("binding"), "asker", "answerer", nonce, r, ProofFlagPw)) {
		t.Error("the same inputs give another proof")
	}
}

// TestReadFieldLimit is a peer announcing a field longer than the reader
// allows: it is refused as malformed before its bytes are read.
func TestReadFieldLimit(t *testing.T) {
	b := AppendField(nil, []byte("0123456789"))
	if got, err := ReadField(bufio.NewReader(bytes.NewReader(b)), 10); err != nil || string(got) != "0123456789" {
		t.Fatalf("within the limit: %q, %v", got, err)
	}
	if _, err := ReadField(bufio.NewReader(bytes.NewReader(b)), 9); !errors.Is(err, frame.ErrMalformed) {
		t.Fatalf("beyond the limit: %v, want frame.ErrMalformed", err)
	}
}
