package proxywasm

import "encoding/binary"

// serializePairs encodes a header map as ABI 0.2.1 specifies: the pair
// count, each pair's key and value sizes, then each key and value followed by
// a NUL byte; integers little-endian.
func serializePairs(pairs [][2]string) []byte {
	n := 4
	for _, p := range pairs {
		n += 8 + len(p[0]) + len(p[1]) + 2
	}
	b := make([]byte, 0, n)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(pairs)))
	for _, p := range pairs {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(p[0])))
		b = binary.LittleEndian.AppendUint32(b, uint32(len(p[1])))
	}
	for _, p := range pairs {
		b = append(append(b, p[0]...), 0)
		b = append(append(b, p[1]...), 0)
	}
	return b
}
