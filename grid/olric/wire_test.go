package olric

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/core/wire"
)

func TestConfigValidation(t *testing.T) {
	c := DefaultLocalConfig()
	c.BindAddr = ""
	if _, err := Start(context.Background(), c); !errors.Is(err, ErrNoBindAddr) {
		t.Errorf("no BindAddr: %v, want ErrNoBindAddr", err)
	}
	c = DefaultLocalConfig()
	c.RoutingLease = c.HandoverGrace
	if _, err := Start(context.Background(), c); !errors.Is(err, ErrTimings) {
		t.Errorf("lease = grace: %v, want ErrTimings", err)
	}
	c = DefaultLocalConfig()
	c.Clock = clock.Monotonic()
	if _, err := Start(context.Background(), c); !errors.Is(err, ErrClock) {
		t.Errorf("monotonic clock: %v, want ErrClock", err)
	}
	if _, err := DefaultLANConfig().withDefaults(); !errors.Is(err, ErrNoBindAddr) {
		t.Errorf("LAN config without an address: %v, want ErrNoBindAddr", err)
	}
}

// requestFrame encodes one caller frame as a v2 caller sends it.
func requestFrame(id uint64, kind byte, budget time.Duration, key string, req []byte) []byte {
	f := appendFrameHeader(nil, id, kind)
	f = binary.AppendUvarint(f, uint64(budget))
	f = appendKey(f, key)
	f = append(f, req...)
	return finishFrame(f, 0)
}

// pipeReader is a frameReader over a byte slice, without deadlines.
func pipeReader(b []byte) *frameReader {
	return &frameReader{r: bufio.NewReader(bytes.NewReader(b))}
}

func TestFrameRoundTrip(t *testing.T) {
	f := append([]byte("junk"), requestFrame(300, kindExecute, time.Second, "k", []byte{1, 2, 3})...)
	body, err := pipeReader(f[4:]).next()
	if err != nil {
		t.Fatal(err)
	}
	id, kind, payload, err := parseFrame(body)
	if err != nil || id != 300 || kind != kindExecute {
		t.Fatalf("parseFrame: %d %d %v", id, kind, err)
	}
	budget, payload, err := parseUvarint(payload)
	if err != nil || budget != uint64(time.Second) {
		t.Fatalf("budget: %d %v", budget, err)
	}
	key, rest, err := parseKey(payload)
	if err != nil || key != "k" || string(rest) != "\x01\x02\x03" {
		t.Fatalf("parseKey: %q %v %v", key, rest, err)
	}
	if _, _, err := parseKey([]byte{5, 'a'}); err == nil {
		t.Error("a key longer than its payload parsed")
	}
	if _, _, _, err := parseFrame([]byte{0x80}); err == nil {
		t.Error("a truncated id parsed")
	}
	if _, _, err := parseUvarint(nil); err == nil {
		t.Error("a missing budget parsed")
	}
}

func TestFrameLimits(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    uint32
		ok   bool
	}{{"empty", 0, true}, {"at the limit", maxFrame, true}, {"one over", maxFrame + 1, false}, {"1 MiB", 1 << 20, false}} {
		t.Run(tc.name, func(t *testing.T) {
			f := binary.BigEndian.AppendUint32(nil, tc.n)
			f = append(f, make([]byte, min(tc.n, maxFrame))...)
			body, err := pipeReader(f).next()
			if tc.ok != (err == nil) || (err == nil && len(body) != int(tc.n)) {
				t.Fatalf("%d bytes: body %d, err %v", tc.n, len(body), err)
			}
			if !tc.ok && !errors.Is(err, errFrame) {
				t.Fatalf("err %v, want errFrame", err)
			}
		})
	}
}

// TestFrameBufferGrowsWithData announces a maximal frame and sends only
// part of it: the buffer holds at most twice what arrived.
func TestFrameBufferGrowsWithData(t *testing.T) {
	for _, sent := range []int{0, 1, 100, 5000} {
		f := binary.BigEndian.AppendUint32(nil, maxFrame)
		f = append(f, make([]byte, sent)...)
		fr := pipeReader(f)
		if _, err := fr.next(); !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("%d bytes sent: err %v, want EOF", sent, err)
		}
		if c := cap(fr.buf); c > max(2*sent, minFrameBuf) {
			t.Errorf("%d of %d bytes sent: buffer grew to %d", sent, maxFrame, c)
		}
	}
	// A large frame's buffer is dropped before the next frame.
	f := binary.BigEndian.AppendUint32(nil, maxFrame)
	f = append(f, make([]byte, maxFrame)...)
	f = append(f, 0, 0, 0, 1, 7)
	fr := pipeReader(f)
	if _, err := fr.next(); err != nil {
		t.Fatal(err)
	}
	if b, err := fr.next(); err != nil || len(b) != 1 || cap(fr.buf) > keepFrameBuf {
		t.Fatalf("small frame after a large one: %v %v, buffer %d", b, err, cap(fr.buf))
	}
}

// TestMaxFrameFitsLargestRequest builds the largest request core accepts,
// with the longest key Olric stores, and its largest answer, and checks
// that both fit in a frame.
func TestMaxFrameFitsLargestRequest(t *testing.T) {
	req := largestRequest(t)
	enc := wire.AppendRequest(nil, &req)
	frame := requestFrame(1<<63, kindExecute, time.Duration(1<<62), string(make([]byte, 255)), enc)
	if len(frame)-4 > maxFrame {
		t.Errorf("largest request: %d bytes, limit %d", len(frame)-4, maxFrame)
	}
	_, _, resp := wire.Process(nil, req, 1<<62)
	if resp.Diagnostics == nil || len(resp.Results) != wire.MaxOps {
		t.Fatalf("not the largest answer: %+v", resp.Status)
	}
	for i := range resp.Results {
		resp.Results[i] = wire.Result{OK: true, Tokens: 1 << 62, Wait: 1 << 62, Reset: 1 << 62}
	}
	resp.TTL = 1 << 62
	o := outcome{kind: kindOK, resp: resp}
	if n := len(o.appendFrame(nil, 1<<63)) - 4; n > maxFrame {
		t.Errorf("largest answer: %d bytes, limit %d", n, maxFrame)
	}
	t.Logf("largest request frame %d bytes, answer %d", len(frame)-4, len(o.appendFrame(nil, 1<<63))-4)
}

// largestRequest returns the largest request core accepts.
func largestRequest(t testing.TB) wire.Request {
	t.Helper()
	var bws []core.Bandwidth
	for i := range core.MaxBandwidths {
		b := core.Greedy(1<<62, 1<<62, time.Duration(1<<62))
		b.ID = string(bytes.Repeat([]byte{byte('a' + i)}, core.MaxIDLen))
		bws = append(bws, b)
	}
	cfg, err := core.NewConfig(bws...)
	if err != nil {
		t.Fatal(err)
	}
	ops := make([]wire.Op, wire.MaxOps)
	for i := range ops {
		ops[i] = wire.Op{Kind: wire.OpTryConsume, Tokens: 1 << 62, MaxWait: 1 << 62}
	}
	return wire.Request{Mode: wire.ModeCreateIfAbsent, Config: &cfg, ConfigVersion: 1 << 62, Ops: ops, Verbose: true}
}

// TestOwnerChannelRejectsGarbage checks that a corrupt request gets an
// error answer, that a malformed frame closes the connection, and that the
// member keeps serving afterwards.
func TestOwnerChannelRejectsGarbage(t *testing.T) {
	ms := startCluster(t, 1, nil)
	m := ms[0]
	c, err := net.Dial("tcp", m.ChannelAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	f := append(preamble[:], requestFrame(7, kindExecute, time.Second, "k", []byte{0xff, 0xff})...)
	if _, err := c.Write(f); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	var pre [len(preamble)]byte
	if _, err := io.ReadFull(r, pre[:]); err != nil || pre != preamble {
		t.Fatalf("preamble %q %v", pre, err)
	}
	fr := &frameReader{r: r}
	body, err := fr.next()
	if err != nil {
		t.Fatal(err)
	}
	if id, kind, _, err := parseFrame(body); err != nil || id != 7 || kind != kindError {
		t.Fatalf("answer to a corrupt request: id %d kind %d err %v; want an error frame", id, kind, err)
	}
	// A frame claiming to be larger than allowed ends the connection.
	if _, err := c.Write([]byte{0xff, 0xff, 0xff, 0xff}); err != nil {
		t.Fatal(err)
	}
	if _, err := fr.next(); err == nil {
		t.Fatal("connection still open after an oversized frame")
	}
	cfg, _ := core.NewConfig(core.Intervally(5, 5, time.Hour))
	resp, err := m.Execute(context.Background(), "after-garbage", consumeReq(&cfg, 2))
	if err != nil || !resp.Results[0].OK {
		t.Fatalf("member stopped serving: %v %v", resp, err)
	}
}
