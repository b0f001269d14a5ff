package main

import (
	"bufio"
	"bytes"
	"context"
	endian "encoding/binary"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/proto"
)

// h2client is the benchmark's lean load client: gRPC's unary call over one
// HTTP/2 connection, in the manner of Envoy's rate-limit filter rather than
// grpc-go's client. Requests arrive already encoded (h2message); the calls
// of all callers are written together, one write for every call ready to
// go (a caller yields once before writing, as grid/olric's owner channel
// does), with a fixed grpc-timeout, as Envoy sends its filter's timeout;
// one reader goroutine decodes the answers. On the wire it is an ordinary
// gRPC client (the servers under test cannot tell it from grpc-go's), and
// both services get the same one: it only spends less CPU per call on the
// client's side, which on a shared 2-core machine leaves more for the
// servers.
type h2client struct {
	conn      net.Conn
	authority string

	mu       sync.Mutex // guards everything below
	enc      *hpack.Encoder
	hbuf     bytes.Buffer  // header block being encoded
	wbuf     []byte        // frames to write
	spare    []byte        // the previous wbuf, for reuse
	framer   *http2.Framer // appends to wbuf
	flushing bool
	nextID   uint32
	pending  map[uint32]*h2call
	window   int64 // connection send window, for DATA
	grown    *sync.Cond
	err      error
}

// h2call is one call in flight.
type h2call struct {
	data []byte // the answer's DATA so far
	done chan struct{}
	resp *rlspb.RateLimitResponse
	err  error
}

// appender is an io.Writer appending to a slice.
type appender struct{ b *[]byte }

func (a appender) Write(p []byte) (int, error) {
	*a.b = append(*a.b, p...)
	return len(p), nil
}

// h2timeout is the grpc-timeout every call sends: Envoy's filter sends its
// configured timeout, the same on every call.
const h2timeout = "10S"

// dialH2 connects to a gRPC server at addr (no TLS).
func dialH2(addr string) (*h2client, error) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	c := &h2client{conn: conn, authority: addr, nextID: 1, pending: map[uint32]*h2call{}, window: 65535}
	c.grown = sync.NewCond(&c.mu)
	c.enc = hpack.NewEncoder(&c.hbuf)
	c.framer = http2.NewFramer(appender{&c.wbuf}, nil)
	c.wbuf = append(c.wbuf, http2.ClientPreface...)
	c.framer.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20})
	// room for the answers: the connection's receive window, topped up
	// as answers arrive
	c.framer.WriteWindowUpdate(0, 1<<30)
	if _, err := conn.Write(c.wbuf); err != nil {
		conn.Close()
		return nil, err
	}
	c.wbuf = c.wbuf[:0]
	go c.read()
	return c, nil
}

// h2message frames a request as a gRPC message.
func h2message(req *rlspb.RateLimitRequest) []byte {
	b, err := proto.Marshal(req)
	if err != nil {
		panic(err)
	}
	msg := make([]byte, 5, 5+len(b))
	endian.BigEndian.PutUint32(msg[1:], uint32(len(b)))
	return append(msg, b...)
}

// Close ends the connection; calls in flight fail.
func (c *h2client) Close() error { return c.conn.Close() }

// ShouldRateLimit sends msg (from h2message) and waits for the answer or
// ctx's end.
func (c *h2client) ShouldRateLimit(ctx context.Context, msg []byte) (*rlspb.RateLimitResponse, error) {
	call := &h2call{done: make(chan struct{})}
	c.mu.Lock()
	for c.err == nil && c.window < int64(len(msg)) {
		c.grown.Wait()
	}
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, err
	}
	id := c.nextID
	c.nextID += 2
	c.hbuf.Reset()
	for _, f := range [...]hpack.HeaderField{
		{Name: ":method", Value: "POST"},
		{Name: ":scheme", Value: "http"},
		{Name: ":path", Value: "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"},
		{Name: ":authority", Value: c.authority},
		{Name: "content-type", Value: "application/grpc"},
		{Name: "te", Value: "trailers"},
		{Name: "grpc-timeout", Value: h2timeout},
	} {
		c.enc.WriteField(f)
	}
	c.framer.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.hbuf.Bytes(), EndHeaders: true})
	c.framer.WriteData(id, true, msg)
	c.window -= int64(len(msg))
	c.pending[id] = call
	c.flushLocked()
	c.mu.Unlock()
	select {
	case <-call.done:
		return call.resp, call.err
	case <-ctx.Done():
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
		return nil, ctx.Err()
	}
}

// flushLocked writes out, unless another caller is writing, after
// yielding once so that callers ready to send add their frames first.
// Called with mu held; returns with it held.
func (c *h2client) flushLocked() {
	if c.flushing {
		return
	}
	c.flushing = true
	c.mu.Unlock()
	runtime.Gosched()
	c.mu.Lock()
	for len(c.wbuf) > 0 && c.err == nil {
		buf := c.wbuf
		c.wbuf = c.spare[:0]
		c.mu.Unlock()
		_, err := c.conn.Write(buf)
		c.mu.Lock()
		c.spare = buf[:0]
		if err != nil {
			c.failLocked(err)
		}
	}
	c.flushing = false
}

// flushSoon has frames the reader added (acknowledgements, window
// updates) written by another goroutine: the reader must never wait for a
// write, or a server waiting for its own writes to be read could wait for
// ever. Called with mu held.
func (c *h2client) flushSoon() {
	if !c.flushing {
		go func() {
			c.mu.Lock()
			c.flushLocked()
			c.mu.Unlock()
		}()
	}
}

// failLocked fails every call in flight and every later one.
func (c *h2client) failLocked(err error) {
	if c.err == nil {
		c.err = err
	}
	for id, call := range c.pending {
		call.err = c.err
		close(call.done)
		delete(c.pending, id)
	}
	c.grown.Broadcast()
}

// read decodes frames until the connection ends.
func (c *h2client) read() {
	fr := http2.NewFramer(nil, bufio.NewReaderSize(c.conn, 32<<10))
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	var unacked uint32 // DATA bytes received since the last window update
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			c.mu.Lock()
			c.failLocked(fmt.Errorf("h2client: %w", err))
			c.mu.Unlock()
			return
		}
		c.mu.Lock()
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				f.ForeachSetting(func(s http2.Setting) error {
					if s.ID == http2.SettingHeaderTableSize {
						c.enc.SetMaxDynamicTableSizeLimit(s.Val)
					}
					return nil
				})
				c.framer.WriteSettingsAck()
				c.flushSoon()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				c.framer.WritePing(true, f.Data)
				c.flushSoon()
			}
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				c.window += int64(f.Increment)
				c.grown.Broadcast()
			}
		case *http2.DataFrame:
			if call := c.pending[f.StreamID]; call != nil {
				call.data = append(call.data, f.Data()...)
			}
			if unacked += f.Length; unacked > 1<<20 {
				c.framer.WriteWindowUpdate(0, unacked)
				unacked = 0
				c.flushSoon()
			}
		case *http2.MetaHeadersFrame:
			if call := c.pending[f.StreamID]; call != nil && f.StreamEnded() {
				delete(c.pending, f.StreamID)
				call.resp, call.err = decodeAnswer(f, call.data)
				close(call.done)
			}
		case *http2.RSTStreamFrame:
			if call := c.pending[f.StreamID]; call != nil {
				delete(c.pending, f.StreamID)
				call.err = fmt.Errorf("h2client: stream reset: %v", f.ErrCode)
				close(call.done)
			}
		case *http2.GoAwayFrame:
			c.failLocked(fmt.Errorf("h2client: server sent GOAWAY: %v", f.ErrCode))
		}
		c.mu.Unlock()
	}
}

// decodeAnswer checks the trailers' grpc-status and decodes the message.
func decodeAnswer(trailers *http2.MetaHeadersFrame, data []byte) (*rlspb.RateLimitResponse, error) {
	if s := trailers.PseudoValue("status"); s != "" && s != "200" {
		return nil, fmt.Errorf("h2client: HTTP status %s", s)
	}
	field := func(name string) string {
		for _, f := range trailers.RegularFields() {
			if f.Name == name {
				return f.Value
			}
		}
		return ""
	}
	code, err := strconv.Atoi(field("grpc-status"))
	if err != nil {
		return nil, errors.New("h2client: answer without grpc-status")
	}
	if code != 0 {
		return nil, fmt.Errorf("h2client: grpc-status %d: %s", code, field("grpc-message"))
	}
	if len(data) < 5 || data[0] != 0 || int(endian.BigEndian.Uint32(data[1:5])) != len(data)-5 {
		return nil, errors.New("h2client: malformed answer message")
	}
	var resp rlspb.RateLimitResponse
	if err := proto.Unmarshal(data[5:], &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// TestLeanClient checks the benchmark's lean client against an instance:
// concurrent checks through it and through grpc-go on one limit admit the
// limit exactly, its answers carry the codes, limits and headers grpc-go's
// do, an error status comes back as an error, and a closed connection
// fails its calls instead of hanging them.
func TestLeanClient(t *testing.T) {
	dir := writeConfig(t, t.TempDir(), map[string]string{"c.yaml": `
domain: lean
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 50}
`})
	in := startInstance(t, "-config", dir, "-grpc-addr", "127.0.0.1:0", "-http-addr", "", "-backend", "memory",
		"-headers", "ietf,retry-after")
	lean, err := dialH2(in.grpcAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer lean.Close()
	grpcGo := client(t, in.grpcAddr)
	ctx := context.Background()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for range 10 {
				r := req("lean", "k", "v")
				var resp *rlspb.RateLimitResponse
				var err error
				if i%2 == 0 {
					resp, err = lean.ShouldRateLimit(ctx, h2message(r))
				} else {
					resp, err = grpcGo.ShouldRateLimit(ctx, r)
				}
				if err != nil {
					t.Error(err)
					return
				}
				if resp.OverallCode == rlspb.RateLimitResponse_OK {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if admitted.Load() != 50 {
		t.Errorf("%d of 80 admitted under a limit of 50", admitted.Load())
	}
	// one more each way: both over the limit, answered alike
	a, err := lean.ShouldRateLimit(ctx, h2message(req("lean", "k", "v")))
	if err != nil {
		t.Fatal(err)
	}
	b, err := grpcGo.ShouldRateLimit(ctx, req("lean", "k", "v"))
	if err != nil {
		t.Fatal(err)
	}
	if d := compare(b, a); d != "" || a.OverallCode != rlspb.RateLimitResponse_OVER_LIMIT || len(a.ResponseHeadersToAdd) == 0 {
		t.Errorf("lean client's answer %v differs from grpc-go's %v:\n%s", a, b, d)
	}
	if len(a.ResponseHeadersToAdd) != len(b.ResponseHeadersToAdd) {
		t.Errorf("headers: lean %v, grpc-go %v", a.ResponseHeadersToAdd, b.ResponseHeadersToAdd)
	}
	if _, err := lean.ShouldRateLimit(ctx, h2message(&rlspb.RateLimitRequest{Domain: "lean"})); err == nil ||
		!strings.Contains(err.Error(), "grpc-status 3") {
		t.Errorf("request without descriptors: %v, want grpc-status 3 (InvalidArgument)", err)
	}
	lean.Close()
	if _, err := lean.ShouldRateLimit(ctx, h2message(req("lean", "k", "v"))); err == nil {
		t.Error("a call on a closed connection succeeded")
	}
}
