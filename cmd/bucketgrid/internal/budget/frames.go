package budget

import (
	"context"
	"encoding/binary"
	"net"
	"sync"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// HTTP/2 framing, as far as a followed connection reads it (RFC 9113 §3.4,
// §4.1, §6.1, §6.2, §6.10).
const (
	prefaceLen   = 24 // the client connection preface
	frameHdrLen  = 9  // length (24 bits), type, flags, stream (31 bits)
	frameData    = 0x0
	frameHeaders = 0x1
	frameCont    = 0x9
	flagEnd      = 0x1 // END_STREAM
	flagPadded   = 0x8
	msgHdrLen    = 5 // a gRPC message's prefix: compressed flag, length (32 bits)
	readBufLen   = 16 << 10
)

// frameConn is a server connection the budget follows: it reads the HTTP/2
// frame headers of the bytes the gRPC server reads, hands them out never
// past the end of a frame (so the server has read no further than the
// frame it is handling: when the tap runs for a call, the last frame
// handed out is its HEADERS or CONTINUATION), and charges the data of each
// DATA frame, its padding left out as gRPC drops it, to its stream's call
// once the frame is handed out whole, before the server hands it on. It
// reads the length of the call's message from the data's first bytes and
// marks the call's message arrived (see Arrived) once its bytes, or its
// stream's END_STREAM, are handed out.
type frameConn struct {
	net.Conn
	b    *Budget
	key  connKey
	host string     // the peer's address without its port (see owner)
	peer *peer.Peer // gRPC's peer of its calls, once a call found it (under b.followMu)

	// read state, of the reading goroutine only
	buf     []byte
	r, w    int
	rerr    error
	preface int
	hdr     [frameHdrLen]byte
	nhdr    int
	left    int    // payload bytes of the current frame not handed out
	seen    int    // payload bytes of the current frame handed out
	pad     int    // the padding of the current DATA frame
	cur     *grant // the call of the current DATA frame's stream (nil: none)
	// complete are the calls whose message was handed out in full since
	// the last Read: gRPC has handled those bytes once it reads again.
	complete []*grant
	closeOne sync.Once

	mu    sync.Mutex
	last  [2]uint32         // type and stream of the last frame handed out whole (a DATA frame: from its header on)
	calls map[uint32]*grant // the calls of the streams open, by stream
}

// connKey names a connection as gRPC's peer does: its two addresses.
type connKey struct{ remote, local string }

func (b *Budget) follow(c net.Conn) net.Conn {
	remote := c.RemoteAddr().String()
	fc := &frameConn{Conn: c, b: b, buf: make([]byte, readBufLen), preface: prefaceLen,
		key: connKey{remote, c.LocalAddr().String()}, host: host(remote), calls: map[uint32]*grant{}}
	fc.last[0] = 0xff
	b.followMu.Lock()
	b.followConns[fc.key] = fc
	b.followMu.Unlock()
	return fc
}

// followed returns the followed connection of the gRPC call of ctx, nil
// when it is not one. gRPC puts one peer in the contexts of all the calls
// of a connection, so the connection is found by its addresses once and by
// its peer after that, without formatting an address per call.
func (b *Budget) followed(ctx context.Context) *frameConn {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil || p.LocalAddr == nil {
		return nil
	}
	b.followMu.Lock()
	fc, ok := b.followPeers[p]
	b.followMu.Unlock()
	if ok {
		return fc
	}
	key := connKey{p.Addr.String(), p.LocalAddr.String()}
	b.followMu.Lock()
	defer b.followMu.Unlock()
	fc = b.followConns[key]
	if fc != nil && fc.peer == nil {
		fc.peer = p
		b.followPeers[p] = fc
	}
	return fc
}

// opening returns the stream whose HEADERS were handed out last, and
// whether there is one (c may be nil).
func (c *frameConn) opening() (uint32, bool) {
	if c == nil {
		return 0, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if (c.last[0] != frameHeaders && c.last[0] != frameCont) || c.calls[c.last[1]] != nil {
		return 0, false
	}
	return c.last[1], true
}

// adopt makes g the call of stream.
func (c *frameConn) adopt(stream uint32, g *grant) {
	c.mu.Lock()
	g.conn, g.stream = c, stream
	c.calls[stream] = g
	c.mu.Unlock()
}

// forget drops g, the call of stream, once it has given its bytes back.
func (c *frameConn) forget(stream uint32, g *grant) {
	c.mu.Lock()
	if c.calls[stream] == g {
		delete(c.calls, stream)
	}
	c.mu.Unlock()
}

// Read hands out the bytes read from the connection, never past the end
// of the preface or of a frame's header or payload.
func (c *frameConn) Read(p []byte) (int, error) {
	// gRPC's reader asks for more bytes only once it has handled those
	// it has (a frame is read and handled before the next is read): a
	// message handed out whole before this call is now in its stream's
	// buffer, and reading it waits on nothing. Not earlier: between
	// reading a frame and handling it gRPC's reader can wait (its
	// throttle, for a client that does not read its answers).
	for i, g := range c.complete {
		g.arrived.Store(true)
		c.complete[i] = nil
	}
	c.complete = c.complete[:0]
	if len(p) == 0 {
		return 0, nil
	}
	if c.r == c.w {
		if c.rerr != nil {
			return 0, c.rerr
		}
		n, err := c.Conn.Read(c.buf)
		c.r, c.w, c.rerr = 0, n, err
		if n == 0 {
			c.rerr = nil
			return 0, err
		}
	}
	lim := c.left
	switch {
	case c.preface > 0:
		lim = c.preface
	case c.nhdr < frameHdrLen:
		lim = frameHdrLen - c.nhdr
	}
	n := copy(p[:min(len(p), lim)], c.buf[c.r:c.w])
	c.handOut(c.buf[c.r : c.r+n])
	c.r += n
	return n, nil
}

// handOut follows the framing through b, bytes within one unit (preface,
// frame header, payload).
func (c *frameConn) handOut(b []byte) {
	switch {
	case c.preface > 0:
		c.preface -= len(b)
	case c.nhdr < frameHdrLen:
		c.nhdr += copy(c.hdr[c.nhdr:], b)
		if c.nhdr == frameHdrLen {
			c.left = int(c.hdr[0])<<16 | int(c.hdr[1])<<8 | int(c.hdr[2])
			c.seen, c.pad, c.cur = 0, 0, nil
			if c.hdr[3] == frameData {
				// found once per frame, not per piece handed out
				stream := binary.BigEndian.Uint32(c.hdr[5:]) & (1<<31 - 1)
				c.mu.Lock()
				c.last = [2]uint32{frameData, stream}
				c.cur = c.calls[stream]
				c.mu.Unlock()
			}
			if c.left == 0 {
				c.frameDone()
			}
		}
	default:
		if c.seen == 0 && c.hdr[3] == frameData && c.hdr[4]&flagPadded != 0 {
			c.pad = 1 + int(b[0])
		}
		if g := c.cur; g != nil && g.nMsgHdr < msgHdrLen {
			c.msgPrefix(g, b)
		}
		c.seen += len(b)
		if c.left -= len(b); c.left == 0 {
			c.frameDone()
		}
	}
}

// msgPrefix copies to g's message prefix what b, the payload of the
// current DATA frame from c.seen on, holds of the frame's data: its
// padding (the length byte before, the padding after) left out.
func (c *frameConn) msgPrefix(g *grant, b []byte) {
	start := 0
	if c.hdr[4]&flagPadded != 0 {
		start = 1
	}
	end := c.seen + c.left - (c.pad - start)
	if lo, hi := max(start, c.seen), min(end, c.seen+len(b)); lo < hi {
		g.nMsgHdr += copy(g.msgHdr[g.nMsgHdr:], b[lo-c.seen:hi-c.seen])
	}
}

// frameDone is the end of a frame's bytes: a DATA frame's data is charged
// to its stream's call.
func (c *frameConn) frameDone() {
	typ, stream := c.hdr[3], binary.BigEndian.Uint32(c.hdr[5:])&(1<<31-1)
	c.nhdr = 0
	if typ != frameData {
		c.mu.Lock()
		c.last = [2]uint32{uint32(typ), stream}
		c.mu.Unlock()
		return
	}
	g := c.cur
	c.cur = nil
	if g == nil {
		return
	}
	data := int64(c.seen - c.pad)
	if data > 0 {
		g.grow(data)
	}
	if g.received(data, c.hdr[4]&flagEnd != 0) {
		c.complete = append(c.complete, g)
	}
}

// Close closes the connection and stops following it; its calls give
// their bytes back as gRPC ends them.
func (c *frameConn) Close() error {
	c.closeOne.Do(func() {
		c.b.followMu.Lock()
		if c.b.followConns[c.key] == c {
			delete(c.b.followConns, c.key)
		}
		if c.peer != nil && c.b.followPeers[c.peer] == c {
			delete(c.b.followPeers, c.peer)
		}
		c.b.followMu.Unlock()
	})
	return c.Conn.Close()
}

// Listener returns ln with every connection it accepts followed: its
// gRPC calls take the bytes of their messages as they arrive (see GRPC).
// For a server without TLS; with TLS, see Credentials.
func (b *Budget) Listener(ln net.Listener) net.Listener { return followListener{ln, b} }

type followListener struct {
	net.Listener
	b *Budget
}

func (l followListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return l.b.follow(c), nil
}

// Credentials returns creds with every connection followed once its
// handshake is done, as Listener does without TLS.
func (b *Budget) Credentials(creds credentials.TransportCredentials) credentials.TransportCredentials {
	return followCreds{creds, b}
}

type followCreds struct {
	credentials.TransportCredentials
	b *Budget
}

func (f followCreds) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := f.TransportCredentials.ServerHandshake(c)
	if err != nil {
		return nil, nil, err
	}
	return f.b.follow(conn), info, nil
}

func (f followCreds) Clone() credentials.TransportCredentials {
	return followCreds{f.TransportCredentials.Clone(), f.b}
}
