package olric

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// The owner channel is a stream of frames in both directions:
//
//	uint32 big-endian body length | body
//	body = uvarint request id | kind byte | payload
//
// A caller sends kindExecute (uvarint key length, key, core request bytes)
// or kindRemove (uvarint key length, key); the owner answers with the same
// id: kindOK (core response bytes; empty for a remove), kindNotOwner,
// kindHold (uvarint nanoseconds to wait before retrying) or kindError
// (message). Many requests may be in flight on one connection, answered in
// any order.
const (
	kindExecute byte = iota + 1
	kindRemove
	kindOK
	kindNotOwner
	kindHold
	kindError
)

// maxFrame bounds a frame body; a peer sending more is cut off.
const maxFrame = 1 << 20

var errFrame = errors.New("bucketgrid/olric: malformed frame")

// appendFrameHeader starts a frame in dst; finishFrame fills in its length.
func appendFrameHeader(dst []byte, id uint64, kind byte) []byte {
	dst = append(dst, 0, 0, 0, 0)
	dst = binary.AppendUvarint(dst, id)
	return append(dst, kind)
}

// finishFrame writes the body length of the frame starting at dst[start:].
func finishFrame(dst []byte, start int) []byte {
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
	return dst
}

func appendKey(dst []byte, key string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(key)))
	return append(dst, key...)
}

// readFrame reads one frame body from r into buf (grown as needed).
func readFrame(r *bufio.Reader, buf []byte) ([]byte, error) {
	var h [4]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return buf, err
	}
	n := binary.BigEndian.Uint32(h[:])
	if n > maxFrame {
		return buf, fmt.Errorf("%w: %d bytes", errFrame, n)
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	_, err := io.ReadFull(r, buf)
	return buf, err
}

// parseFrame splits a frame body.
func parseFrame(body []byte) (id uint64, kind byte, payload []byte, err error) {
	id, n := binary.Uvarint(body)
	if n <= 0 || n >= len(body) {
		return 0, 0, nil, errFrame
	}
	return id, body[n], body[n+1:], nil
}

// parseKey splits a key off a payload.
func parseKey(p []byte) (key string, rest []byte, err error) {
	l, n := binary.Uvarint(p)
	if n <= 0 || l > uint64(len(p)-n) {
		return "", nil, errFrame
	}
	return string(p[n : n+int(l)]), p[n+int(l):], nil
}
