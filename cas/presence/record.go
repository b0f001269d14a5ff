package presence

import (
	"bytes"
	"encoding/hex"
)

// id names one Counter, chosen at random.
type id [16]byte

// recordMagic starts a presence record; the instance's id follows in hex,
// so that an operator reading the store sees what the key holds.
const recordMagic = "bucketgrid instance v1 "

// withdrawn is what a withdrawing instance leaves in its slot until the
// slot expires: no record, so no longer counted.
var withdrawn = []byte("bucketgrid instance withdrawn")

// encode returns the record of i.
func (i id) encode() []byte {
	b := make([]byte, 0, len(recordMagic)+2*len(i))
	b = append(b, recordMagic...)
	return hex.AppendEncode(b, i[:])
}

// decode returns the id of a presence record; ok is false for anything
// else (a withdrawn slot, bytes some other writer left under the prefix).
func decode(b []byte) (i id, ok bool) {
	rest, found := bytes.CutPrefix(b, []byte(recordMagic))
	if !found || len(rest) != hex.EncodedLen(len(i)) {
		return i, false
	}
	if _, err := hex.Decode(i[:], rest); err != nil {
		return i, false
	}
	return i, true
}
