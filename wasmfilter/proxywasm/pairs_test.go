package proxywasm

import (
	"bytes"
	"testing"
)

// The example of the ABI 0.2.1 specification: {{"a": "1"}, {"b": "22"}}.
func TestSerializePairsMatchesTheSpec(t *testing.T) {
	got := serializePairs([][2]string{{"a", "1"}, {"b", "22"}})
	want := []byte{
		2, 0, 0, 0,
		1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0,
		'a', 0, '1', 0, 'b', 0, '2', '2', 0,
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("got  %v\nwant %v", got, want)
	}
	if got := serializePairs(nil); !bytes.Equal(got, []byte{0, 0, 0, 0}) {
		t.Fatalf("empty map: %v", got)
	}
}
