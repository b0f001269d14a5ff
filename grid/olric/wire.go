package olric

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"slices"
	"time"
)

// The owner channel, version 2. After the transport is set up (mutual TLS
// 1.3, or plain TCP for a member without channel security), the caller
// sends the preamble "BGOC" + version byte and the owner answers with its
// own before its first answer; a side that reads another preamble closes
// the connection. Then both directions carry frames:
//
//	uint32 big-endian body length | body
//	body = uvarint request id | kind byte | payload
//
// A caller sends kindExecute (uvarint budget, uvarint key length, key, core
// request bytes) or kindRemove (uvarint budget, uvarint key length, key).
// The budget is the nanoseconds the caller still waits for the answer; the
// owner measures it from when it reads the frame and drops the request
// (answering kindError) if it has run out before execution. The owner
// answers with the same id: kindOK (core response bytes; empty for a
// remove), kindNotOwner, kindHold (uvarint nanoseconds to wait before
// retrying) or kindError (message). Many requests may be in flight on one
// connection, answered in any order.
//
// Added within version 2 (an older owner closes the connection on them, and
// the caller retries until its deadline): a caller may send kindMerge
// (uvarint budget, uvarint key length, key, uvarint TTL nanoseconds, a
// bucket state), a bucket written on another side of a split that the
// owner merges (kindOK, empty); an owner without a quorum answers
// kindNoQuorum. A caller with leases on (LeaseConfig) may send kindLease
// (uvarint budget, uvarint key length, key, uvarint tokens wanted, the
// give-back of its previous lease: uvarint unused tokens, uvarint epoch,
// uvarint grant time, uvarint configuration fingerprint, uvarint lease
// generation; then core request bytes), which the owner answers like
// kindExecute or with kindLeased (uvarint tokens granted, uvarint grant
// time, uvarint epoch, uvarint fingerprint, uvarint lease generation,
// uvarint lifetime nanoseconds, uvarint state length, the bucket state
// before the grant, then core response bytes).
const (
	kindExecute byte = iota + 1
	kindRemove
	kindOK
	kindNotOwner
	kindHold
	kindError
	kindMerge
	kindNoQuorum
	kindLease
	kindLeased
)

// channelVersion is the owner channel's wire version; version 1 had no
// preamble and no budget.
const channelVersion = 2

var preamble = [5]byte{'B', 'G', 'O', 'C', channelVersion}

// maxFrame bounds a frame body: a peer announcing more is cut off. The
// largest request core accepts (MaxOps operations, MaxBandwidths
// bandwidths with the longest ids) and the longest key fit, as do their
// answers (TestMaxFrameFitsLargestRequest).
const maxFrame = 64 << 10

// Frame buffers start at minFrameBuf bytes, grow as a frame's bytes
// arrive, never ahead of them, and are dropped after a frame larger than
// keepFrameBuf.
const (
	minFrameBuf  = 512
	keepFrameBuf = 8 << 10
)

var (
	errFrame    = errors.New("bucketgrid/olric: malformed frame")
	errPreamble = errors.New("bucketgrid/olric: not a bucketgrid owner channel of this version")
)

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

// frameReader reads frames from one connection with deadlines: idle bounds
// the wait for a frame's first byte, step the wait for the rest of it once
// that arrived (0: no deadline).
type frameReader struct {
	r          *bufio.Reader
	conn       net.Conn
	idle, step time.Duration
	buf        []byte
}

// next returns the next frame body; it is valid until the following call.
func (f *frameReader) next() ([]byte, error) {
	if cap(f.buf) > keepFrameBuf {
		f.buf = nil
	}
	if f.r.Buffered() == 0 {
		switch {
		case f.idle > 0:
			f.conn.SetReadDeadline(time.Now().Add(f.idle))
		case f.step > 0:
			f.conn.SetReadDeadline(time.Time{})
		}
		if _, err := f.r.Peek(1); err != nil {
			return nil, err
		}
	}
	// A frame has begun: the rest of it must come within step.
	deadline := false
	wait := func() {
		if !deadline && f.step > 0 {
			f.conn.SetReadDeadline(time.Now().Add(f.step))
			deadline = true
		}
	}
	if f.r.Buffered() < 4 {
		wait()
	}
	h, err := f.r.Peek(4)
	if err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint32(h))
	if n > maxFrame {
		return nil, fmt.Errorf("%w: %d bytes", errFrame, n)
	}
	f.r.Discard(4)
	if f.buf == nil {
		f.buf = make([]byte, 0, minFrameBuf)
	}
	f.buf = f.buf[:0]
	for len(f.buf) < n {
		if len(f.buf) == cap(f.buf) {
			// Grow by what has arrived so far at most: a header announcing
			// a large frame costs nothing until its bytes come.
			f.buf = slices.Grow(f.buf, min(n-len(f.buf), len(f.buf)))
		}
		if f.r.Buffered() < n-len(f.buf) {
			wait()
		}
		k, err := f.r.Read(f.buf[len(f.buf):min(n, cap(f.buf))])
		f.buf = f.buf[:len(f.buf)+k]
		if err != nil {
			return nil, err
		}
	}
	return f.buf, nil
}

// parseFrame splits a frame body.
func parseFrame(body []byte) (id uint64, kind byte, payload []byte, err error) {
	id, n := binary.Uvarint(body)
	if n <= 0 || n >= len(body) {
		return 0, 0, nil, errFrame
	}
	return id, body[n], body[n+1:], nil
}

// parseUvarint splits a uvarint off a payload.
func parseUvarint(p []byte) (uint64, []byte, error) {
	v, n := binary.Uvarint(p)
	if n <= 0 {
		return 0, nil, errFrame
	}
	return v, p[n:], nil
}

// parseKey splits a key off a payload.
func parseKey(p []byte) (key string, rest []byte, err error) {
	l, n := binary.Uvarint(p)
	if n <= 0 || l > uint64(len(p)-n) {
		return "", nil, errFrame
	}
	return string(p[n : n+int(l)]), p[n+int(l):], nil
}
