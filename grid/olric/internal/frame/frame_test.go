package frame

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
	"time"
)

// pipeReader is a Reader over a byte slice, without deadlines.
func pipeReader(b []byte) *Reader {
	return NewReader(bufio.NewReader(bytes.NewReader(b)), nil, 0, 0)
}

// requestFrame encodes one caller frame as a caller sends it.
func requestFrame(id uint64, kind byte, budget time.Duration, key string, req []byte) []byte {
	f := AppendHeader(nil, id, kind)
	f = binary.AppendUvarint(f, uint64(budget))
	f = AppendKey(f, key)
	f = append(f, req...)
	return Finish(f, 0)
}

func TestFrameRoundTrip(t *testing.T) {
	f := append([]byte("junk"), requestFrame(300, KindExecute, time.Second, "k", []byte{1, 2, 3})...)
	body, err := pipeReader(f[4:]).Next()
	if err != nil {
		t.Fatal(err)
	}
	id, kind, payload, err := Parse(body)
	if err != nil || id != 300 || kind != KindExecute {
		t.Fatalf("Parse: %d %d %v", id, kind, err)
	}
	budget, payload, err := Uvarint(payload)
	if err != nil || budget != uint64(time.Second) {
		t.Fatalf("budget: %d %v", budget, err)
	}
	key, rest, err := Key(payload)
	if err != nil || key != "k" || string(rest) != "\x01\x02\x03" {
		t.Fatalf("Key: %q %v %v", key, rest, err)
	}
	if _, _, err := Key([]byte{5, 'a'}); err == nil {
		t.Error("a key longer than its payload parsed")
	}
	if _, _, _, err := Parse([]byte{0x80}); err == nil {
		t.Error("a truncated id parsed")
	}
	if _, _, err := Uvarint(nil); err == nil {
		t.Error("a missing budget parsed")
	}
}

func TestFrameLimits(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    uint32
		ok   bool
	}{{"empty", 0, true}, {"at the limit", Max, true}, {"one over", Max + 1, false}, {"1 MiB", 1 << 20, false}} {
		t.Run(tc.name, func(t *testing.T) {
			f := binary.BigEndian.AppendUint32(nil, tc.n)
			f = append(f, make([]byte, min(tc.n, Max))...)
			body, err := pipeReader(f).Next()
			if tc.ok != (err == nil) || (err == nil && len(body) != int(tc.n)) {
				t.Fatalf("%d bytes: body %d, err %v", tc.n, len(body), err)
			}
			if !tc.ok && !errors.Is(err, ErrMalformed) {
				t.Fatalf("err %v, want ErrMalformed", err)
			}
		})
	}
}

// TestFrameBufferGrowsWithData announces a maximal frame and sends only
// part of it: the buffer holds at most twice what arrived.
func TestFrameBufferGrowsWithData(t *testing.T) {
	for _, sent := range []int{0, 1, 100, 5000} {
		f := binary.BigEndian.AppendUint32(nil, Max)
		f = append(f, make([]byte, sent)...)
		fr := pipeReader(f)
		if _, err := fr.Next(); !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("%d bytes sent: err %v, want EOF", sent, err)
		}
		if c := cap(fr.buf); c > max(2*sent, minBuf) {
			t.Errorf("%d of %d bytes sent: buffer grew to %d", sent, Max, c)
		}
	}
	// A large frame's buffer is dropped before the next frame.
	f := binary.BigEndian.AppendUint32(nil, Max)
	f = append(f, make([]byte, Max)...)
	f = append(f, 0, 0, 0, 1, 7)
	fr := pipeReader(f)
	if _, err := fr.Next(); err != nil {
		t.Fatal(err)
	}
	if b, err := fr.Next(); err != nil || len(b) != 1 || cap(fr.buf) > KeepBuf {
		t.Fatalf("small frame after a large one: %v %v, buffer %d", b, err, cap(fr.buf))
	}
}

// TestPaddedBudgetReadsAsUvarint writes budgets padded to BudgetLen bytes,
// rewrites them in place, and reads them back as an owner does (Uvarint),
// with the rest of the payload intact.
func TestPaddedBudgetReadsAsUvarint(t *testing.T) {
	for _, v := range []uint64{0, 1, 127, 128, 1e9, 1 << 62, 1<<63 - 1, 1 << 63, 1<<64 - 1} {
		p := AppendBudget(nil, 5)
		p = append(p, 0xAB)
		if len(p) != BudgetLen+1 {
			t.Fatalf("%d: budget of %d bytes, want %d", v, len(p)-1, BudgetLen)
		}
		PutBudget(p, v)
		got, rest, err := Uvarint(p)
		if want := min(v, 1<<63-1); err != nil || got != want || len(rest) != 1 || rest[0] != 0xAB {
			t.Errorf("%d: read %d, rest %x, %v; want %d", v, got, rest, err, want)
		}
	}
}
