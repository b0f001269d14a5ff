// Package frame owns the owner channel's wire framing: the preamble, the
// frame header and length, the kinds of frame, and the reader that takes
// frames off a connection with deadlines and a bounded buffer. What a
// payload means past its key (core requests and responses, merges, leases)
// belongs to grid/olric, the only importer.
package frame

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"slices"
	"time"
)

// The owner channel, version 2, and its kinds of frame. After the
// transport is set up (mutual TLS 1.3, or plain TCP for a member without
// channel security), the caller sends the preamble "BGOC" + version byte
// and the owner answers with its own before its first answer; a side that
// reads another preamble closes the connection. Then both directions carry
// frames:
//
//	uint32 big-endian body length | body
//	body = uvarint request id | kind byte | payload
//
// A caller sends KindExecute (uvarint budget, uvarint key length, key, core
// request bytes) or KindRemove (uvarint budget, uvarint key length, key).
// The budget is the nanoseconds the caller still waits for the answer when
// the frame is written (a caller may pad it to BudgetLen bytes); the owner
// measures it from when it reads the frame and drops the request
// (answering KindError) if it has run out before execution. The owner
// answers with the same id: KindOK (core response bytes; empty for a
// remove), KindNotOwner, KindHold (uvarint nanoseconds to wait before
// retrying) or KindError (message). Many requests may be in flight on one
// connection, answered in any order.
//
// Added within version 2 (an older owner closes the connection on them, and
// the caller retries until its deadline): a caller may send KindMerge
// (uvarint budget, uvarint key length, key, uvarint TTL nanoseconds, a
// bucket state), a bucket written on another side of a split that the
// owner merges (KindOK, empty); an owner without a quorum answers
// KindNoQuorum. A caller with leases on (LeaseConfig) may send KindLease
// (uvarint budget, uvarint key length, key, uvarint tokens wanted, the
// give-back of its previous lease: uvarint unused tokens, uvarint epoch,
// uvarint grant time, uvarint configuration fingerprint, uvarint lease
// generation; then core request bytes), which the owner answers like
// KindExecute or with KindLeased (uvarint tokens granted, uvarint grant
// time, uvarint epoch, uvarint fingerprint, uvarint lease generation,
// uvarint lifetime nanoseconds, uvarint state length, the bucket state
// before the grant, then core response bytes).
//
// Also added within version 2: a member about to leave gracefully sends
// KindReplicated (uvarint budget, an empty key, uvarint fingerprint of its
// routing table) to ask another member whether every bucket of the
// partitions that member owns has a copy on each of the partition's owner
// and backups. The other
// answers KindOK (empty) when its newest routing table has the same
// fingerprint and it vouches for its partitions, else KindError (why not
// yet: ask again).
const (
	KindExecute byte = iota + 1
	KindRemove
	KindOK
	KindNotOwner
	KindHold
	KindError
	KindMerge
	KindNoQuorum
	KindLease
	KindLeased
	KindReplicated
)

// Version is the owner channel's wire version; version 1 had no
// preamble and no budget.
const Version = 2

// Preamble opens the owner channel in both directions.
var Preamble = [5]byte{'B', 'G', 'O', 'C', Version}

// Max bounds a frame body: a peer announcing more is cut off. The
// largest request core accepts (MaxOps operations, MaxBandwidths
// bandwidths with the longest ids) and the longest key fit, as do their
// answers (grid/olric's TestMaxFrameFitsLargestRequest).
const Max = 64 << 10

// Frame buffers start at minBuf bytes, grow as a frame's bytes arrive,
// never ahead of them, and are dropped after a frame larger than KeepBuf;
// writers keep their buffers to the same bound.
const (
	minBuf  = 512
	KeepBuf = 8 << 10
)

// The errors of reading frames: a body that does not parse or is longer
// than Max, and a connection that does not open with Preamble.
var (
	ErrMalformed = errors.New("bucketgrid/olric: malformed frame")
	ErrPreamble  = errors.New("bucketgrid/olric: not a bucketgrid owner channel of this version")
)

// AppendHeader starts a frame in dst; Finish fills in its length.
func AppendHeader(dst []byte, id uint64, kind byte) []byte {
	dst = append(dst, 0, 0, 0, 0)
	dst = binary.AppendUvarint(dst, id)
	return append(dst, kind)
}

// Finish writes the body length of the frame starting at dst[start:].
func Finish(dst []byte, start int) []byte {
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
	return dst
}

// BudgetLen is the width of a budget as a caller writes it: a uvarint
// padded with continuation bytes (binary.Uvarint reads it as the plain
// one), so that the caller can rewrite it in place, with PutBudget, when the
// frame leaves.
const BudgetLen = 9

// AppendBudget appends budget nanoseconds in BudgetLen bytes.
func AppendBudget(dst []byte, budget uint64) []byte {
	var b [BudgetLen]byte
	PutBudget(b[:], budget)
	return append(dst, b[:]...)
}

// PutBudget writes budget nanoseconds into b[:BudgetLen], as a uvarint
// padded with continuation bytes; budgets of 2^63 ns and more are written
// as 2^63-1 (292 years).
func PutBudget(b []byte, budget uint64) {
	budget = min(budget, 1<<63-1)
	for i := range BudgetLen - 1 {
		b[i] = byte(budget) | 0x80
		budget >>= 7
	}
	b[BudgetLen-1] = byte(budget)
}

// AppendKey appends a key as a payload carries it: uvarint length, bytes.
func AppendKey(dst []byte, key string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(key)))
	return append(dst, key...)
}

// Reader reads frames from one connection with deadlines: idle bounds the
// wait for a frame's first byte, step the wait for the rest of it once that
// arrived (0: no deadline). Its bufio.Reader reads what comes before the
// frames (the preamble) and tells whether more bytes are already buffered.
type Reader struct {
	*bufio.Reader
	conn       net.Conn
	idle, step time.Duration
	buf        []byte
}

// NewReader returns a Reader of frames from r, which reads conn; conn sets
// the deadlines, and may be nil when idle and step are 0.
func NewReader(r *bufio.Reader, conn net.Conn, idle, step time.Duration) *Reader {
	return &Reader{Reader: r, conn: conn, idle: idle, step: step}
}

// Next returns the next frame body; it is valid until the following call.
func (f *Reader) Next() ([]byte, error) {
	if cap(f.buf) > KeepBuf {
		f.buf = nil
	}
	if f.Reader.Buffered() == 0 {
		switch {
		case f.idle > 0:
			f.conn.SetReadDeadline(time.Now().Add(f.idle))
		case f.step > 0:
			f.conn.SetReadDeadline(time.Time{})
		}
		if _, err := f.Reader.Peek(1); err != nil {
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
	if f.Reader.Buffered() < 4 {
		wait()
	}
	h, err := f.Reader.Peek(4)
	if err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint32(h))
	if n > Max {
		return nil, fmt.Errorf("%w: %d bytes", ErrMalformed, n)
	}
	f.Reader.Discard(4)
	if f.buf == nil {
		f.buf = make([]byte, 0, minBuf)
	}
	f.buf = f.buf[:0]
	for len(f.buf) < n {
		if len(f.buf) == cap(f.buf) {
			// Grow by what has arrived so far at most: a header announcing
			// a large frame costs nothing until its bytes come.
			f.buf = slices.Grow(f.buf, min(n-len(f.buf), len(f.buf)))
		}
		if f.Reader.Buffered() < n-len(f.buf) {
			wait()
		}
		k, err := f.Reader.Read(f.buf[len(f.buf):min(n, cap(f.buf))])
		f.buf = f.buf[:len(f.buf)+k]
		if err != nil {
			return nil, err
		}
	}
	return f.buf, nil
}

// Parse splits a frame body.
func Parse(body []byte) (id uint64, kind byte, payload []byte, err error) {
	id, n := binary.Uvarint(body)
	if n <= 0 || n >= len(body) {
		return 0, 0, nil, ErrMalformed
	}
	return id, body[n], body[n+1:], nil
}

// Uvarint splits a uvarint off a payload.
func Uvarint(p []byte) (uint64, []byte, error) {
	v, n := binary.Uvarint(p)
	if n <= 0 {
		return 0, nil, ErrMalformed
	}
	return v, p[n:], nil
}

// Key splits a key off a payload.
func Key(p []byte) (key string, rest []byte, err error) {
	l, n := binary.Uvarint(p)
	if n <= 0 || l > uint64(len(p)-n) {
		return "", nil, ErrMalformed
	}
	return string(p[n : n+int(l)]), p[n+int(l):], nil
}
