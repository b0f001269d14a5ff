package olric

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bucketgrid/bucketgrid/core/wire"
	"github.com/bucketgrid/bucketgrid/grid/olric/internal/frame"
)

// trust.go's names for what internal/frame owns; they go when trust.go
// names frame's own.
const channelVersion = frame.Version

var preamble = frame.Preamble

// errExpired answers a request whose budget ran out before execution.
// It is a context.DeadlineExceeded.
var errExpired = fmt.Errorf("bucketgrid/olric: request expired before execution: %w", context.DeadlineExceeded)

// errStoreFailed opens the answer to a request whose execution the owner
// would retry had it come from itself (an outcome with retry: its Olric
// call failed, for one because Olric closed the connection to a holder
// that left, "redis: client is closed", or dialled a dead one): the
// caller retries it as it would its own, within its budget. Before, a
// caller failed at once where the owner itself retried (TestCrash beside
// busy loops: "owner …: client is closed").
var errStoreFailed = errors.New("bucketgrid/olric: the owner's store call failed (retryable)")

// connBuf is the size of a connection's read and write buffers, on both
// sides of the owner channel.
const connBuf = 4 << 10

// The owner side of the owner channel: the listener, the connections of
// the other members and the execution of their requests (the caller side
// is peers.go).

// pollDeadline is a read deadline in the past: a read with it returns at
// once, with what is already there or a timeout.
var pollDeadline = time.Unix(1, 0)

// channel is the owner side of the owner channel: its listener, the
// connections of the other members (each served by a goroutine of its own)
// and the execution of their requests.
type channel struct {
	m            *Member
	addr         string // BindAddr:BindPort+1
	ln           net.Listener
	acceptErrors atomic.Int64  // failed Accepts, for tests
	slots        chan struct{} // one per connection goroutine; see maxConnGoroutines
	mu           sync.Mutex    // guards conns
	conns        conns
}

// listen prepares the channel of m and opens its listener at addr; serve
// then accepts its connections.
func (ch *channel) listen(m *Member, addr string) error {
	ch.m, ch.addr = m, addr
	ch.conns = conns{established: map[net.Conn]struct{}{}, special: map[net.Conn]struct{}{}}
	ch.slots = make(chan struct{}, ch.maxConnGoroutines())
	var err error
	ch.ln, err = m.cfg.listen("tcp", addr)
	return err
}

// close closes the listener and every connection; serve and the
// connections' goroutines then end.
func (ch *channel) close() {
	if ch.ln == nil {
		return
	}
	ch.ln.Close()
	ch.mu.Lock()
	ch.conns.closed = true
	for _, nc := range ch.conns.handshaking {
		nc.c.Close()
	}
	for c := range ch.conns.established {
		c.Close()
	}
	for c := range ch.conns.special {
		c.Close()
	}
	ch.mu.Unlock()
}

// conns tracks the owner channel's connections: those still handshaking,
// oldest first, and those established. Guarded by channel.mu.
type conns struct {
	handshaking []*newConn
	established map[net.Conn]struct{}
	// special are the connections of serveSpecial (Olric's tunnelled
	// traffic, identity questions), outside ChannelMaxConns: Olric's
	// client pools its connections to each member.
	special map[net.Conn]struct{}
	closed  bool
}

// newConn is a connection that has not finished its handshake; spoke is
// set once its first byte arrived.
type newConn struct {
	c     net.Conn
	spoke atomic.Bool
}

// maxHandshaking is how many connections may be handshaking at once.
func (ch *channel) maxHandshaking() int { return max(ch.m.cfg.ChannelMaxConns/4, 16) }

// maxConnGoroutines is how many connections, handshaking, established or
// dropped but not yet ended, may hold a goroutine (and its memory) at once:
// the size of channel.slots.
func (ch *channel) maxConnGoroutines() int {
	return ch.maxHandshaking() + ch.m.cfg.ChannelMaxConns + ch.maxSpecial()
}

// maxSpecial is how many connections of serveSpecial (tunnelled Olric
// traffic, identity questions) may be open at once, beside ChannelMaxConns.
func (ch *channel) maxSpecial() int { return ch.m.cfg.ChannelMaxConns }

// serve accepts owner-channel connections until the member shuts down.
// Like net/http.Server.Serve, it backs off after a failed Accept (too many
// open files, ...) and continues: a member that stopped accepting would
// fail its keys everywhere.
func (ch *channel) serve() {
	m := ch.m
	defer m.wg.Done()
	var delay time.Duration
	for {
		// A slot for the connection's goroutine first: a connection holds
		// its memory until its goroutine has ended, also after it was
		// dropped, so under CPU starvation dropped connections could pile
		// up faster than they end. The slots bound them, whatever the
		// scheduler does.
		select {
		case ch.slots <- struct{}{}:
		case <-m.ctx.Done():
			return
		}
		c, err := ch.ln.Accept()
		if err != nil {
			<-ch.slots
			if m.ctx.Err() != nil {
				return
			}
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			ch.acceptErrors.Add(1)
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-m.ctx.Done():
				t.Stop()
				return
			}
			continue
		}
		delay = 0
		if !m.trust.doors.Admit(c.RemoteAddr(), m.mono()) {
			c.Close() // too many failed handshakes from there lately
			<-ch.slots
			continue
		}
		nc := &newConn{c: c}
		var evict net.Conn
		ch.mu.Lock()
		if ch.conns.closed {
			ch.mu.Unlock()
			c.Close()
			<-ch.slots
			return
		}
		if hs := ch.conns.handshaking; len(hs) >= ch.maxHandshaking() {
			// Drop the oldest connection that has not said a word, else
			// the oldest: a flood of silent or slow connections cannot
			// keep a member out, since a member's handshake is quick.
			i := slices.IndexFunc(hs, func(n *newConn) bool { return !n.spoke.Load() })
			evict = hs[max(i, 0)].c
			ch.conns.handshaking = slices.Delete(hs, max(i, 0), max(i, 0)+1)
		}
		ch.conns.handshaking = append(ch.conns.handshaking, nc)
		m.wg.Add(1)
		ch.mu.Unlock()
		if evict != nil {
			evict.Close()
		}
		go ch.serveConn(nc)
	}
}

// handshake authenticates a new connection (TLS when configured, then the
// preamble) within ChannelIOTimeout and moves it to the established ones,
// if there is room. It returns the connection to use, or nil, and the
// preamble it opened with (see serveSpecial). A connection that spoke but
// failed TLS or the preamble counts against its source (see internal/trust.Throttle).
func (ch *channel) handshake(nc *newConn) (net.Conn, [len(frame.Preamble)]byte) {
	m := ch.m
	var p [len(frame.Preamble)]byte
	c, ok := ch.authenticate(nc, &p)
	if !ok {
		if nc.spoke.Load() && m.ctx.Err() == nil {
			m.trust.doors.Failed(nc.c.RemoteAddr(), m.mono())
		}
		return nil, p
	}
	if m.trust.creds.server != nil {
		m.trust.doors.Verified(nc.c.RemoteAddr(), m.mono())
	}
	nc.c.SetDeadline(time.Time{})
	ch.mu.Lock()
	defer ch.mu.Unlock()
	i := slices.Index(ch.conns.handshaking, nc)
	if i < 0 || ch.conns.closed {
		return nil, p // dropped meanwhile
	}
	ch.conns.handshaking = slices.Delete(ch.conns.handshaking, i, i+1)
	if p != frame.Preamble {
		if len(ch.conns.special) >= ch.maxSpecial() {
			return nil, p
		}
		ch.conns.special[nc.c] = struct{}{}
		return c, p
	}
	if len(ch.conns.established) >= m.cfg.ChannelMaxConns {
		return nil, p
	}
	ch.conns.established[nc.c] = struct{}{}
	return c, p
}

// authenticate runs TLS, when configured, and reads the preamble into p;
// ok is false when either failed.
func (ch *channel) authenticate(nc *newConn, p *[len(frame.Preamble)]byte) (c net.Conn, ok bool) {
	m := ch.m
	raw := nc.c
	raw.SetDeadline(time.Now().Add(m.cfg.ChannelIOTimeout))
	var first [1]byte
	if _, err := io.ReadFull(raw, first[:]); err != nil {
		return nil, false
	}
	nc.spoke.Store(true)
	c = &prefixConn{Conn: raw, prefix: first[:]}
	if m.trust.creds.server != nil {
		tc := tls.Server(c, m.trust.creds.server)
		if tc.Handshake() != nil || m.trust.verifySource(raw, tc) != nil {
			return nil, false
		}
		m.trust.callers.Store(raw, tc.ConnectionState().PeerCertificates[0])
		c = tc
	}
	if _, err := io.ReadFull(c, p[:]); err != nil || !knownPreamble(*p) {
		return nil, false
	}
	return c, true
}

// prefixConn is a connection whose first bytes were already read.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (p *prefixConn) Read(b []byte) (int, error) {
	if len(p.prefix) > 0 {
		n := copy(b, p.prefix)
		p.prefix = p.prefix[n:]
		return n, nil
	}
	return p.Conn.Read(b)
}

// serveConn serves one caller: it reads requests and executes them in
// order on this goroutine; answers go out in one write per batch of
// requests that arrived together (it flushes when no further request is
// buffered).
func (ch *channel) serveConn(nc *newConn) {
	m := ch.m
	defer m.wg.Done()
	defer func() { <-ch.slots }()
	defer func() {
		nc.c.Close()
		ch.mu.Lock()
		if i := slices.Index(ch.conns.handshaking, nc); i >= 0 {
			ch.conns.handshaking = slices.Delete(ch.conns.handshaking, i, i+1)
		}
		delete(ch.conns.established, nc.c)
		delete(ch.conns.special, nc.c)
		ch.mu.Unlock()
		m.trust.callers.Delete(nc.c)
	}()
	c, p := ch.handshake(nc)
	if c == nil {
		return
	}
	if p != frame.Preamble {
		ch.serveSpecial(c, p)
		return
	}
	fr := frame.NewReader(bufio.NewReaderSize(c, connBuf), c, m.cfg.ChannelIdleTimeout, m.cfg.ChannelIOTimeout)
	w := bufio.NewWriterSize(c, connBuf)
	w.Write(frame.Preamble[:])
	_, tlsConn := c.(*tls.Conn)
	var out []byte
	var received int64 // when the bytes of the current batch were read
	for {
		fresh := fr.Buffered() == 0
		buf, err := fr.Next()
		if err != nil {
			return
		}
		if fresh {
			received = m.mono()
		}
		id, kind, payload, err := frame.Parse(buf)
		if err != nil || (kind != frame.KindExecute && kind != frame.KindRemove && kind != frame.KindMerge && kind != frame.KindLease && kind != frame.KindReplicated) {
			return
		}
		budget, payload, err := frame.Uvarint(payload)
		if err != nil {
			return
		}
		key, rest, err := frame.Key(payload)
		if err != nil {
			return
		}
		var req wire.Request
		var want int64
		var give giveBack
		if err = checkKey(key); err == nil && kind == frame.KindLease {
			want, give, rest, err = parseLeaseParams(rest)
		}
		if err == nil && (kind == frame.KindExecute || kind == frame.KindLease) {
			req, err = wire.DecodeRequest(rest)
		}
		switch {
		case err != nil:
			out = appendErrorFrame(out[:0], id, err)
		case m.mono()-received >= int64(min(budget, 1<<62)):
			out = appendErrorFrame(out[:0], id, errExpired)
		case kind == frame.KindReplicated:
			out = m.exec.resync.answer(out[:0], id, rest)
		default:
			// The caller waits budget from when the batch was read, and
			// the execution may not outlast it (execBounded). Not m.ctx:
			// a member closing answers through hold (frame.KindHold, so that the
			// caller goes to the next owner), and its Olric calls end with
			// the routing lease, which m.ctx ends too.
			c := ownerCall{kind: kind, key: key, h: m.hash(key), notAfter: received + int64(min(budget, 1<<62)), owned: true}
			switch kind {
			case frame.KindMerge:
				c.merge = rest
			case frame.KindLease:
				c.req, c.want, c.give = &req, want, give
			case frame.KindExecute:
				c.req = &req
			}
			o := m.exec.execBounded(context.Background(), &c)
			out = o.appendFrame(out[:0], id)
		}
		if w.Available() < len(out) || fr.Buffered() == 0 {
			c.SetWriteDeadline(time.Now().Add(m.cfg.ChannelIOTimeout))
		}
		if _, err := w.Write(out); err != nil {
			return
		}
		if cap(out) > frame.KeepBuf {
			out = nil
		}
		if fr.Buffered() == 0 && tlsConn {
			// TLS hands out one record per Read, so requests that came in
			// several records would get a flush each. Take whatever TLS
			// already holds or the socket already has, without waiting
			// (a deadline in the past makes the read a poll), and flush
			// once for all of it.
			c.SetReadDeadline(pollDeadline)
			if _, err := fr.Peek(1); err == nil {
				received = m.mono()
			}
		}
		if fr.Buffered() == 0 {
			if err := w.Flush(); err != nil {
				return
			}
		}
	}
}

// serveSpecial serves a connection that opened with another preamble than
// the bucket channel's: an identity question or Olric's tunnelled
// protocol.
func (ch *channel) serveSpecial(c net.Conn, p [5]byte) {
	switch p {
	case identityPreamble:
		ch.m.trust.serveIdentity(c)
	case tunnelPreamble:
		ch.serveTunnel(c)
	}
}

func appendErrorFrame(dst []byte, id uint64, err error) []byte {
	start := len(dst)
	dst = frame.AppendHeader(dst, id, frame.KindError)
	dst = append(dst, err.Error()...)
	return frame.Finish(dst, start)
}

// appendFrame encodes an owner outcome as the answer to request id.
func (o *outcome) appendFrame(dst []byte, id uint64) []byte {
	start := len(dst)
	switch o.kind {
	case frame.KindOK:
		if o.grant != nil {
			dst = frame.AppendHeader(dst, id, frame.KindLeased)
			dst = appendGrant(dst, o.grant)
			dst = wire.AppendResponse(dst, &o.resp)
			break
		}
		dst = frame.AppendHeader(dst, id, frame.KindOK)
		if !o.removed {
			dst = wire.AppendResponse(dst, &o.resp)
		}
	case frame.KindHold:
		dst = frame.AppendHeader(dst, id, frame.KindHold)
		dst = binary.AppendUvarint(dst, uint64(o.hold))
	case frame.KindNotOwner:
		dst = frame.AppendHeader(dst, id, frame.KindNotOwner)
	case frame.KindNoQuorum:
		dst = frame.AppendHeader(dst, id, frame.KindNoQuorum)
	default:
		if o.retry {
			return appendErrorFrame(dst, id, fmt.Errorf("%w: %w", errStoreFailed, o.err))
		}
		return appendErrorFrame(dst, id, o.err)
	}
	if len(dst)-start-4 > frame.Max {
		return appendErrorFrame(dst[:start], id, errors.New("bucketgrid/olric: response larger than the frame limit"))
	}
	return frame.Finish(dst, start)
}

// channelAddr returns the owner-channel address of the member called name
// (its BindAddr:BindPort): the same host, port BindPort+1. It is derived
// from the member's name in Olric's routing table, which only members
// (holding the gossip key and Olric's password) can write.
func channelAddr(name string) (string, error) {
	host, port, err := net.SplitHostPort(name)
	if err != nil {
		return "", err
	}
	p, err := strconv.Atoi(port)
	if err != nil || p <= 0 || p >= 65535 {
		return "", fmt.Errorf("bucketgrid/olric: member name %q has no valid port", name)
	}
	return net.JoinHostPort(host, strconv.Itoa(p+1)), nil
}
