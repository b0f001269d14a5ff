package olric

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/core/wire"
	"github.com/bucketgrid/bucketgrid/grid/olric/internal/frame"
)

// openChannel connects to m's owner channel in plain TCP, sends data and
// returns the connection with a reader past the member's preamble (or nil
// if the member sent none).
func openChannel(t *testing.T, m *Member, data []byte) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", m.ChannelAddr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Write(data); err != nil {
		t.Fatal(err)
	}
	return c, bufio.NewReader(c)
}

// closedWithin reports whether the member hangs up on c within d (reading
// and discarding whatever it sends).
func closedWithin(c net.Conn, r *bufio.Reader, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, r)
	var ne net.Error
	return err == nil || !(errors.As(err, &ne) && ne.Timeout())
}

// TestChannelDeadlines checks the owner's read deadlines: a connection
// that never completes its handshake, one that stops in the middle of a
// frame, and one that sends nothing after its preamble are closed, each
// by its own deadline.
func TestChannelDeadlines(t *testing.T) {
	ms := startCluster(t, 1, func(c *Config) {
		c.ChannelIOTimeout = 300 * time.Millisecond
		c.ChannelIdleTimeout = time.Hour
	})
	m := ms[0]
	half := binary.BigEndian.AppendUint32(append(frame.Preamble[:], nil...), 100)
	half = append(half, 1, 2, 3)
	for _, tc := range []struct {
		name string
		send []byte
	}{
		{"silent", nil},
		{"half a frame.Preamble", frame.Preamble[:2]},
		{"half a frame", half},
		{"half a header", append(frame.Preamble[:], 0, 0)},
	} {
		c, r := openChannel(t, m, tc.send)
		if !closedWithin(c, r, 10*time.Second) {
			t.Errorf("%s: still open 10 s after a 300 ms deadline", tc.name)
		}
	}
	// Idle after the preamble: the idle deadline (an hour) applies, not
	// the frame deadline; a request still gets its answer.
	c, r := openChannel(t, m, frame.Preamble[:])
	time.Sleep(time.Second) // longer than ChannelIOTimeout, on purpose
	cfg := testBucket(5)
	req := wire.AppendRequest(nil, new(consumeReq(&cfg, 1)))
	if _, err := c.Write(requestFrame(1, frame.KindExecute, 5*time.Second, "idle", req)); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var pre [len(frame.Preamble)]byte
	if _, err := io.ReadFull(r, pre[:]); err != nil {
		t.Fatalf("idle connection closed before its idle deadline: %v", err)
	}
	if _, err := frame.NewReader(r, nil, 0, 0).Next(); err != nil {
		t.Fatalf("no answer on an idle connection: %v", err)
	}

	ms = startCluster(t, 1, func(c *Config) { c.ChannelIdleTimeout = 300 * time.Millisecond })
	c, r = openChannel(t, ms[0], frame.Preamble[:])
	if !closedWithin(c, r, 10*time.Second) {
		t.Error("idle connection open 10 s after a 300 ms idle deadline")
	}
}

// TestExpiredRequestsDropped sends an owner a request whose caller has no
// time left: it is answered with an error and not executed.
func TestExpiredRequestsDropped(t *testing.T) {
	m := startCluster(t, 1, nil)[0]
	cfg := testBucket(5)
	consume := wire.AppendRequest(nil, new(consumeReq(&cfg, 3)))
	avail := wire.AppendRequest(nil, new(availableReq(&cfg)))
	f := append(frame.Preamble[:], requestFrame(1, frame.KindExecute, 1, "late", consume)...) // 1 ns left
	f = append(f, requestFrame(2, frame.KindExecute, 5*time.Second, "late", avail)...)
	c, r := openChannel(t, m, f)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var pre [len(frame.Preamble)]byte
	if _, err := io.ReadFull(r, pre[:]); err != nil {
		t.Fatal(err)
	}
	fr := frame.NewReader(r, nil, 0, 0)
	for range 2 {
		body, err := fr.Next()
		if err != nil {
			t.Fatal(err)
		}
		id, kind, payload, _ := frame.Parse(body)
		switch id {
		case 1:
			if kind != frame.KindError || !strings.Contains(string(payload), "expired") {
				t.Errorf("expired request: kind %d %q, want an expiry error", kind, payload)
			}
		case 2:
			resp, err := wire.DecodeResponse(payload)
			if kind != frame.KindOK || err != nil || resp.Results[0].Tokens != 5 {
				t.Errorf("after the expired request: kind %d %v %v, want 5 tokens", kind, resp.Results, err)
			}
		}
	}
}

// requestFrame encodes one caller frame as a v2 caller sends it.
func requestFrame(id uint64, kind byte, budget time.Duration, key string, req []byte) []byte {
	f := frame.AppendHeader(nil, id, kind)
	f = binary.AppendUvarint(f, uint64(budget))
	f = frame.AppendKey(f, key)
	f = append(f, req...)
	return frame.Finish(f, 0)
}

// TestMaxFrameFitsLargestRequest builds the largest request core accepts,
// with the longest key Olric stores, and its largest answer, and checks
// that both fit in a frame.
func TestMaxFrameFitsLargestRequest(t *testing.T) {
	req := largestRequest(t)
	enc := wire.AppendRequest(nil, &req)
	f := requestFrame(1<<63, frame.KindExecute, time.Duration(1<<62), string(make([]byte, 255)), enc)
	if len(f)-4 > frame.Max {
		t.Errorf("largest request: %d bytes, limit %d", len(f)-4, frame.Max)
	}
	_, _, resp := wire.Process(nil, req, 1<<62)
	if resp.Diagnostics == nil || len(resp.Results) != wire.MaxOps {
		t.Fatalf("not the largest answer: %+v", resp.Status)
	}
	for i := range resp.Results {
		resp.Results[i] = wire.Result{OK: true, Tokens: 1 << 62, Wait: 1 << 62, Reset: 1 << 62}
	}
	resp.TTL = 1 << 62
	o := outcome{kind: frame.KindOK, resp: resp}
	if n := len(o.appendFrame(nil, 1<<63)) - 4; n > frame.Max {
		t.Errorf("largest answer: %d bytes, limit %d", n, frame.Max)
	}
	t.Logf("largest request frame %d bytes, answer %d", len(f)-4, len(o.appendFrame(nil, 1<<63))-4)
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
	f := append(frame.Preamble[:], requestFrame(7, frame.KindExecute, time.Second, "k", []byte{0xff, 0xff})...)
	if _, err := c.Write(f); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	var pre [len(frame.Preamble)]byte
	if _, err := io.ReadFull(r, pre[:]); err != nil || pre != frame.Preamble {
		t.Fatalf("preamble %q %v", pre, err)
	}
	fr := frame.NewReader(r, nil, 0, 0)
	body, err := fr.Next()
	if err != nil {
		t.Fatal(err)
	}
	if id, kind, _, err := frame.Parse(body); err != nil || id != 7 || kind != frame.KindError {
		t.Fatalf("answer to a corrupt request: id %d kind %d err %v; want an error frame", id, kind, err)
	}
	// A frame claiming to be larger than allowed ends the connection.
	if _, err := c.Write([]byte{0xff, 0xff, 0xff, 0xff}); err != nil {
		t.Fatal(err)
	}
	if _, err := fr.Next(); err == nil {
		t.Fatal("connection still open after an oversized frame")
	}
	cfg, _ := core.NewConfig(core.Intervally(5, 5, time.Hour))
	resp, err := m.Execute(context.Background(), "after-garbage", consumeReq(&cfg, 2))
	if err != nil || !resp.Results[0].OK {
		t.Fatalf("member stopped serving: %v %v", resp, err)
	}
}

// TestChannelBatchesWrites loads one owner-channel connection with 64
// concurrent callers (Execute on one member, for keys the other owns) and counts, from /proc/self/io, the write system calls
// the process made (the caller's and the owner's, both ends in this
// process) per request: a batched channel writes every pending request to
// the owner at once and every ready answer back at once, so a busy
// connection costs far less than a write per request on either side.
func TestChannelBatchesWrites(t *testing.T) {
	if r, w := ioCalls(); r < 0 || w < 0 {
		t.Skip("no /proc/self/io on this system")
	}
	ms := startCluster(t, 2, nil)
	ctx := context.Background()
	const callers, calls = 64, 150
	keys := ownedKeys(ms[1], "batch-", callers)
	cfg := testBucket(1 << 40)
	req := consumeReq(&cfg, 1)
	for _, k := range keys { // create the buckets: a first Put costs Olric more
		if _, err := ms[0].Execute(ctx, k, req); err != nil {
			t.Fatalf("warm-up: %v", err)
		}
	}
	reads0, writes0 := ioCalls()
	var wg sync.WaitGroup
	var failed atomic.Int64
	for c := range callers {
		wg.Go(func() {
			for range calls {
				if _, err := ms[0].Execute(ctx, keys[c], req); err != nil {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	reads1, writes1 := ioCalls()
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d of %d calls failed", n, callers*calls)
	}
	reads := float64(reads1-reads0) / (callers * calls)
	writes := float64(writes1-writes0) / (callers * calls)
	t.Logf("%d callers on one connection: %.3f writes and %.3f reads per request, both ends", callers, writes, reads)
	if writes > 0.5 {
		t.Errorf("%.3f write system calls per request with %d concurrent callers on one connection, want at most 0.5", writes, callers)
	}
}

// BenchmarkOwnerChannel runs checks over one owner-channel connection
// (Execute on one member for keys the other owns, both in this process) from 1, 2, 4 and 64 concurrent
// callers, and reports the read and write system calls of both ends per
// check (from /proc/self/io). Count the rest (futexes, epoll waits, the
// runtime's sleeps) with perf stat around a run of the test binary.
func BenchmarkOwnerChannel(b *testing.B) {
	ms := startCluster(b, 2, nil)
	ctx := context.Background()
	cfg := testBucket(1 << 40)
	req := consumeReq(&cfg, 1)
	keys := ownedKeys(ms[1], "bench-channel-", 64)
	for _, callers := range []int{1, 2, 4, 64} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			var next atomic.Int64
			var wg sync.WaitGroup
			reads0, writes0 := ioCalls()
			for c := range callers {
				wg.Go(func() {
					for next.Add(1) <= int64(b.N) {
						if _, err := ms[0].Execute(ctx, keys[c], req); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			reads1, writes1 := ioCalls()
			if reads0 >= 0 && reads1 >= 0 {
				b.ReportMetric(float64(reads1-reads0)/float64(b.N), "reads/op")
				b.ReportMetric(float64(writes1-writes0)/float64(b.N), "writes/op")
			}
		})
	}
}
