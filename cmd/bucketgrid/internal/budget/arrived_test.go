package budget

import (
	"bytes"
	"context"
	"io"
	"net"
	"testing"
	"testing/iotest"

	"golang.org/x/net/http2"
)

// TestArrivedOnceWholeMessage: a call's message counts as arrived once the
// bytes its prefix announces are handed out, its prefix split across DATA
// frames and their padding left out, or once its stream's END_STREAM is,
// and not a frame earlier, and only once gRPC asks for the bytes after it
// (it has then handled the frame); whether gRPC reads the connection a
// byte at a time or a frame at a time.
func TestArrivedOnceWholeMessage(t *testing.T) {
	type frame struct {
		stream uint32
		data   []byte
		pad    int // > 0: padded with pad-1 bytes
		end    bool
		want   bool // the stream's message arrived once the frame is handed out
	}
	frames := []frame{
		{stream: 1, data: []byte{0, 0, 0}, pad: 6},                  // prefix begun, 10 bytes announced below
		{stream: 3, data: []byte{0, 0, 0, 0, 0}, want: true},        // an empty message
		{stream: 1, data: []byte{0, 10, 1, 2, 3, 4}, pad: 1},        // prefix done, 4 of 10 bytes
		{stream: 5, data: append([]byte{0, 0, 0, 0, 100}, 1, 2, 3)}, // 3 of 100 bytes
		{stream: 1, data: []byte{5, 6, 7, 8, 9}},                    // 9 of 10
		{stream: 1, data: []byte{10}, want: true},                   // all 10
		{stream: 5, end: true, want: true},                          // the stream ended short
		{stream: 7, data: append([]byte{1, 0, 0, 0, 2}, 1, 2), pad: 200, // compressed, whole, padded
			want: true},
	}
	var wire bytes.Buffer
	wire.WriteString(http2.ClientPreface)
	fr := http2.NewFramer(&wire, nil)
	var sizes []int
	for _, f := range frames {
		before := wire.Len()
		var err error
		if f.pad > 0 {
			err = fr.WriteDataPadded(f.stream, f.end, f.data, make([]byte, f.pad-1))
		} else {
			err = fr.WriteData(f.stream, f.end, f.data)
		}
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, wire.Len()-before)
	}
	for _, oneByte := range []bool{false, true} {
		b := New(1 << 20)
		c1, c2 := net.Pipe()
		fc := b.follow(c1).(*frameConn)
		go func() { c2.Write(wire.Bytes()); c2.Close() }()
		grants := map[uint32]*grant{}
		for _, f := range frames {
			if grants[f.stream] == nil {
				g := &grant{b: b, cut: make(chan struct{})}
				grants[f.stream] = g
				fc.adopt(f.stream, g)
			}
		}
		var r io.Reader = fc
		if oneByte {
			r = iotest.OneByteReader(fc)
		}
		if _, err := io.ReadFull(r, make([]byte, len(http2.ClientPreface))); err != nil {
			t.Fatal(err)
		}
		arrived := map[uint32]bool{}
		for i, f := range frames {
			if _, err := io.ReadFull(r, make([]byte, sizes[i])); err != nil {
				t.Fatal(err)
			}
			// Handed out is not handled: gRPC's reader may still stop
			// before it passes the frame on (its throttle waits for a
			// client that does not read), so the frame counts only once
			// gRPC asks for more bytes.
			for s, g := range grants {
				ctx := context.WithValue(context.Background(), grantKey{}, g)
				if got := Arrived(ctx); got != arrived[s] {
					t.Fatalf("one byte at a time %v, frame %d handed out, not yet handled: stream %d arrived %v, want %v", oneByte, i, s, got, arrived[s])
				}
			}
			fc.Read(nil)
			arrived[f.stream] = arrived[f.stream] || f.want
			for s, g := range grants {
				ctx := context.WithValue(context.Background(), grantKey{}, g)
				if got := Arrived(ctx); got != arrived[s] {
					t.Fatalf("one byte at a time %v, after frame %d: stream %d arrived %v, want %v", oneByte, i, s, got, arrived[s])
				}
			}
		}
		fc.Close()
	}
	if Arrived(context.Background()) {
		t.Fatal("a call without a reservation arrived")
	}
}
