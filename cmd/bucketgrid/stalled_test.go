package main

import (
	"context"
	endian "encoding/binary"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/bucketgrid/bucketgrid/cmd/bucketgrid/internal/wire"
)

// stallPrefix is what a stalled call sends of its message: the 5-byte
// gRPC prefix announcing a 1,000-byte message and 71 bytes of it, 76 in
// all, as the stalled-call attack on the check port does.
var stallPrefix = func() []byte {
	b := make([]byte, 76)
	endian.BigEndian.PutUint32(b[1:], 1000)
	return b
}()

// stallConn is an attacker's HTTP/2 connection: calls that send their
// headers and stallPrefix and never finish, then one whole check (the
// probe) whose answer says the server has taken in every call before it
// (a connection's frames are handled in order).
type stallConn struct {
	conn    net.Conn
	fr      *http2.Framer
	enc     *hpack.Encoder
	hbuf    []byte
	next    uint32
	written int64 // client bytes of the stalled calls
}

func dialStall(t *testing.T, addr, local string) *stallConn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := &stallConn{conn: conn, next: 1}
	c.fr = http2.NewFramer(conn, conn)
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.enc = hpack.NewEncoder(appender{&c.hbuf})
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	if err := c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	if err := c.fr.WriteWindowUpdate(0, 1<<30); err != nil {
		t.Fatal(err)
	}
	return c
}

// headers writes a check's HEADERS frame and returns its stream.
func (c *stallConn) headers(addr string) (uint32, error) {
	c.hbuf = c.hbuf[:0]
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", wire.ShouldRateLimit},
		{":authority", addr}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		c.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	id := c.next
	c.next += 2
	c.written += int64(9 + len(c.hbuf))
	return id, c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.hbuf, EndHeaders: true})
}

// stall sends n stalled calls.
func (c *stallConn) stall(addr string, n int) error {
	for range n {
		id, err := c.headers(addr)
		if err != nil {
			return err
		}
		c.written += int64(9 + len(stallPrefix))
		if err := c.fr.WriteData(id, false, stallPrefix); err != nil {
			return err
		}
	}
	return nil
}

// probe sends a whole check and returns its answer.
func (c *stallConn) probe(ctx context.Context, addr string) (rlspb.RateLimitResponse_Code, error) {
	id, err := c.headers(addr)
	if err != nil {
		return 0, err
	}
	c.written -= int64(9 + len(c.hbuf)) // not a stalled call's
	if err := c.fr.WriteData(id, true, h2message(req("srv", "k", "probe"))); err != nil {
		return 0, err
	}
	if dl, ok := ctx.Deadline(); ok {
		c.conn.SetReadDeadline(dl)
	}
	var data []byte
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			return 0, err
		}
		switch f := f.(type) {
		case *http2.DataFrame:
			if f.StreamID == id {
				data = append(data, f.Data()...)
			}
		case *http2.MetaHeadersFrame:
			if f.StreamID == id && f.StreamEnded() {
				resp, err := decodeAnswer(f, data)
				if err != nil {
					return 0, err
				}
				return resp.OverallCode, nil
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				return 0, fmt.Errorf("probe reset: %v", f.ErrCode)
			}
		case *http2.GoAwayFrame:
			return 0, errors.New("GOAWAY")
		}
	}
}

// TestStalledChecksCostTheirBytes is the stalled-call attack on the
// check port: calls that send their headers and 76 bytes of a message and
// never finish, from five addresses, each opening connections of 99 such
// calls and a probe until a connection gets none in. Before, a call took
// its worst case (-grpc-window + -grpc-max-read, 320 KiB) from its headers
// on and about limit/320 KiB calls filled the budget; now it must take at
// least stalledFactor times as many, while a check from another address
// passes until the fifth address is in and is answered OVER_LIMIT once
// the budget is full.
func TestStalledChecksCostTheirBytes(t *testing.T) {
	const (
		limit         = 8 << 20
		worstCase     = 64<<10 + 256<<10 // the old reservation: -grpc-window + -grpc-max-read
		stalledFactor = 8
	)
	in, _ := memoryInstance(t, "-max-inflight-bytes", strconv.Itoa(limit), "-grpc-read-timeout", "1h")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	legit := func() rlspb.RateLimitResponse_Code {
		resp, err := client(t, in.grpcAddr).ShouldRateLimit(ctx, req("srv", "k", "legit"))
		if err != nil {
			t.Fatalf("a legitimate check: %v", err)
		}
		return resp.OverallCode
	}
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	calls, written := fillWithStalled(ctx, t, in, limit, 5, legit)
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	if code := legit(); code != rlspb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("a check from another address with the budget full: %v, want OVER_LIMIT", code)
	}
	perCall := float64(written) / float64(calls) // client bytes of a stalled call, refused ones' share included
	old := float64(limit) / worstCase
	t.Logf("%d stalled calls from 5 addresses filled %d bytes (%.1f× the %.0f calls of the worst-case reservation); %.0f client bytes a call, %.0f kB/s renewed every 5 s (scaled to 256 MiB: %.0f calls, %.0f kB/s); live heap +%d bytes, %.0f a call",
		calls, limit, float64(calls)/old, old, perCall, float64(written)/5/1000, float64(calls)*32, float64(written)*32/5/1000,
		int64(after.HeapAlloc)-int64(before.HeapAlloc), float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/float64(calls))
	if float64(calls) < stalledFactor*old {
		t.Fatalf("%d stalled calls filled the budget, want at least %d× the %.0f of the worst-case reservation", calls, stalledFactor, old)
	}
}

// fillWithStalled fills in's check budget of limit bytes with stalled
// calls from addrs addresses (127.0.0.11 on), each opening connections
// of 99 and a probe until a connection gets none in, and returns the calls
// that got in and the client bytes of all stalled calls sent. With legit,
// it fails the test if legit answers OVER_LIMIT before the last address.
func fillWithStalled(ctx context.Context, t *testing.T, in *instance, limit, addrs int, legit func() rlspb.RateLimitResponse_Code) (calls, written int64) {
	t.Helper()
	const perConn = 99
	const refusals = `bucketgrid_rls_budget_refusals_total{answer="over_limit",budget="checks"}`
	refused := func() int {
		n, _ := strconv.Atoi(metricLine(t, in, refusals))
		return n
	}
	for a := range addrs {
		local := fmt.Sprintf("127.0.0.%d", 11+a)
		if a == addrs-1 && legit != nil && legit() == rlspb.RateLimitResponse_OVER_LIMIT { // served by 127.0.0.1
			t.Fatalf("a legitimate check from another address beside 4 attacking ones: OVER_LIMIT, after %d stalled calls", calls)
		}
		for conns := 0; ; conns++ {
			if conns > limit/perConn/76 {
				t.Fatalf("address %s: %d connections and never refused", local, conns)
			}
			c := dialStall(t, in.grpcAddr, local)
			r0 := refused()
			if err := c.stall(in.grpcAddr, perConn); err != nil {
				t.Fatal(err)
			}
			code, err := c.probe(ctx, in.grpcAddr)
			if err != nil {
				t.Fatalf("address %s: probe: %v", local, err)
			}
			got := perConn - (refused() - r0)
			if code == rlspb.RateLimitResponse_OVER_LIMIT {
				got++ // the probe's refusal is not a stalled call's
			}
			calls += int64(got)
			written += c.written
			if got == 0 {
				break
			}
		}
	}
	return calls, written
}
