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
	"runtime"
	"slices"
	"strconv"
	"strings"
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

var (
	// errPeerGone reports a broken owner-channel connection; the caller
	// re-routes and retries.
	errPeerGone = errors.New("bucketgrid/olric: owner connection lost")
	// errPeerBusy reports a connection whose writes are not draining; the
	// caller backs off and retries.
	errPeerBusy = errors.New("bucketgrid/olric: owner connection congested")
	// errTooLarge reports a request that does not fit in a frame.
	errTooLarge = errors.New("bucketgrid/olric: request larger than the owner channel's frame limit")
	// errExpired answers a request whose budget ran out before execution.
	// It is a context.DeadlineExceeded.
	errExpired = fmt.Errorf("bucketgrid/olric: request expired before execution: %w", context.DeadlineExceeded)
)

// Buffer sizes of a connection: reads and writes go through buffers of
// connBuf bytes; a caller's frames not yet written may take up to
// maxPendingWrite bytes before further requests are refused (errPeerBusy).
const (
	connBuf         = 4 << 10
	maxPendingWrite = 256 << 10
)

// ---- owner side ----

// pollDeadline is a read deadline in the past: a read with it returns at
// once, with what is already there or a timeout.
var pollDeadline = time.Unix(1, 0)

// conns tracks the owner channel's connections: those still handshaking,
// oldest first, and those established. Guarded by Member.connMu.
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
func (m *Member) maxHandshaking() int { return max(m.cfg.ChannelMaxConns/4, 16) }

// maxConnGoroutines is how many connections, handshaking, established or
// dropped but not yet ended, may hold a goroutine (and its memory) at once:
// the size of Member.connSlots.
func (m *Member) maxConnGoroutines() int {
	return m.maxHandshaking() + m.cfg.ChannelMaxConns + m.maxSpecial()
}

// maxSpecial is how many connections of serveSpecial (tunnelled Olric
// traffic, identity questions) may be open at once, beside ChannelMaxConns.
func (m *Member) maxSpecial() int { return m.cfg.ChannelMaxConns }

// serve accepts owner-channel connections until the member shuts down.
// Like net/http.Server.Serve, it backs off after a failed Accept (too many
// open files, ...) and continues: a member that stopped accepting would
// fail its keys everywhere.
func (m *Member) serve() {
	defer m.wg.Done()
	var delay time.Duration
	for {
		// A slot for the connection's goroutine first: a connection holds
		// its memory until its goroutine has ended, also after it was
		// dropped, so under CPU starvation dropped connections could pile
		// up faster than they end. The slots bound them, whatever the
		// scheduler does.
		select {
		case m.connSlots <- struct{}{}:
		case <-m.ctx.Done():
			return
		}
		c, err := m.ln.Accept()
		if err != nil {
			<-m.connSlots
			if m.ctx.Err() != nil {
				return
			}
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			m.acceptErrors.Add(1)
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
			<-m.connSlots
			continue
		}
		nc := &newConn{c: c}
		var evict net.Conn
		m.connMu.Lock()
		if m.conns.closed {
			m.connMu.Unlock()
			c.Close()
			<-m.connSlots
			return
		}
		if hs := m.conns.handshaking; len(hs) >= m.maxHandshaking() {
			// Drop the oldest connection that has not said a word, else
			// the oldest: a flood of silent or slow connections cannot
			// keep a member out, since a member's handshake is quick.
			i := slices.IndexFunc(hs, func(n *newConn) bool { return !n.spoke.Load() })
			evict = hs[max(i, 0)].c
			m.conns.handshaking = slices.Delete(hs, max(i, 0), max(i, 0)+1)
		}
		m.conns.handshaking = append(m.conns.handshaking, nc)
		m.wg.Add(1)
		m.connMu.Unlock()
		if evict != nil {
			evict.Close()
		}
		go m.serveConn(nc)
	}
}

// handshake authenticates a new connection (TLS when configured, then the
// preamble) within ChannelIOTimeout and moves it to the established ones,
// if there is room. It returns the connection to use, or nil, and the
// preamble it opened with (see serveSpecial). A connection that spoke but
// failed TLS or the preamble counts against its source (see internal/trust.Throttle).
func (m *Member) handshake(nc *newConn) (net.Conn, [len(frame.Preamble)]byte) {
	var p [len(frame.Preamble)]byte
	c, ok := m.authenticate(nc, &p)
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
	m.connMu.Lock()
	defer m.connMu.Unlock()
	i := slices.Index(m.conns.handshaking, nc)
	if i < 0 || m.conns.closed {
		return nil, p // dropped meanwhile
	}
	m.conns.handshaking = slices.Delete(m.conns.handshaking, i, i+1)
	if p != frame.Preamble {
		if len(m.conns.special) >= m.maxSpecial() {
			return nil, p
		}
		m.conns.special[nc.c] = struct{}{}
		return c, p
	}
	if len(m.conns.established) >= m.cfg.ChannelMaxConns {
		return nil, p
	}
	m.conns.established[nc.c] = struct{}{}
	return c, p
}

// authenticate runs TLS, when configured, and reads the preamble into p;
// ok is false when either failed.
func (m *Member) authenticate(nc *newConn, p *[len(frame.Preamble)]byte) (c net.Conn, ok bool) {
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
func (m *Member) serveConn(nc *newConn) {
	defer m.wg.Done()
	defer func() { <-m.connSlots }()
	defer func() {
		nc.c.Close()
		m.connMu.Lock()
		if i := slices.Index(m.conns.handshaking, nc); i >= 0 {
			m.conns.handshaking = slices.Delete(m.conns.handshaking, i, i+1)
		}
		delete(m.conns.established, nc.c)
		delete(m.conns.special, nc.c)
		m.connMu.Unlock()
		m.trust.callers.Delete(nc.c)
	}()
	c, p := m.handshake(nc)
	if c == nil {
		return
	}
	if p != frame.Preamble {
		m.serveSpecial(c, p)
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
		if err != nil || (kind != frame.KindExecute && kind != frame.KindRemove && kind != frame.KindMerge && kind != frame.KindLease) {
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
			o := m.execBounded(context.Background(), &c)
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
		return appendErrorFrame(dst, id, o.err)
	}
	if len(dst)-start-4 > frame.Max {
		return appendErrorFrame(dst[:start], id, errors.New("bucketgrid/olric: response larger than the frame limit"))
	}
	return frame.Finish(dst, start)
}

// ---- caller side ----

// reply is an owner's answer as the caller receives it, decoded by the
// connection's reader.
type reply struct {
	kind byte
	resp wire.Response // frame.KindOK with a payload (an execute's answer)
	body bool          // frame.KindOK: the answer had a payload
	hold int64         // frame.KindHold: nanoseconds to wait
	msg  string        // frame.KindError: the owner's message
	err  error         // the connection failed, or the answer did not decode
	// grant is a frame.KindLeased answer's lease (kind is then frame.KindOK)
	grant *grant
}

// decodeReply decodes an answer's payload; it keeps no reference to it.
func decodeReply(kind byte, payload []byte) reply {
	switch kind {
	case frame.KindOK:
		if len(payload) == 0 {
			return reply{kind: frame.KindOK}
		}
		resp, err := wire.DecodeResponse(payload)
		if err != nil {
			return reply{err: err}
		}
		return reply{kind: frame.KindOK, resp: resp, body: true}
	case frame.KindLeased:
		g, rest, err := parseGrant(payload)
		if err != nil {
			return reply{err: err}
		}
		resp, err := wire.DecodeResponse(rest)
		if err != nil {
			return reply{err: err}
		}
		return reply{kind: frame.KindOK, resp: resp, body: true, grant: g}
	case frame.KindNotOwner:
		return reply{kind: frame.KindNotOwner}
	case frame.KindNoQuorum:
		return reply{kind: frame.KindNoQuorum}
	case frame.KindHold:
		d, n := binary.Uvarint(payload)
		if n <= 0 {
			return reply{err: frame.ErrMalformed}
		}
		return reply{kind: frame.KindHold, hold: int64(min(d, uint64(time.Hour)))}
	case frame.KindError:
		return reply{kind: frame.KindError, msg: string(payload)}
	}
	return reply{err: frame.ErrMalformed}
}

// replyChans recycles the channels calls wait on: a channel goes back only
// after its one answer was received, when nothing else refers to it.
var replyChans = sync.Pool{New: func() any { return make(chan reply, 1) }}

// peer is a multiplexed connection to another member's owner channel.
//
// Writes are combined: a caller appends its frame to wbuf and, unless
// another caller is already writing, writes wbuf itself, again and again
// while frames keep arriving. Before its first write it yields the
// processor once (runtime.Gosched), so that goroutines already runnable on
// it (other callers of this member, about to send) append their frames
// first: callers that arrive before or during a write ride along with it,
// so a busy connection carries many frames per system call without a
// writer goroutine, and an idle one pays a yield that returns at once. Each
// write must finish within ChannelIOTimeout, and wbuf holds at most
// maxPendingWrite bytes.
//
// A frame keeps its caller's deadline while it waits in wbuf: when its
// write begins (takeBatch), a frame whose caller stopped waiting is dropped,
// one whose budget ran out is dropped and answered errExpired, and the
// others carry the budget left at that moment, so an owner never executes a
// request its caller no longer waits for.
type peer struct {
	m    *Member
	name string
	c    net.Conn

	mu       sync.Mutex // guards everything below
	nextID   uint64
	pending  map[uint64]chan reply
	err      error
	wbuf     []byte
	spare    []byte
	queued   []queued // the frames in wbuf, in order
	flushing bool
}

// queued is a frame waiting in peer.wbuf: wbuf[start:end], its budget at
// wbuf[budgetAt:] (frame.BudgetLen bytes), its caller waiting until
// notAfter (Member.mono nanoseconds).
type queued struct {
	id                   uint64
	start, end, budgetAt int
	notAfter             int64
}

// takeBatch takes the frames in wbuf for one write and leaves wbuf empty.
// It drops the frames of callers that stopped waiting, answers errExpired
// to those whose budget ran out and drops their frames, and writes into the
// others the budget they have left now. Bytes before the first frame (the
// preamble) go out as they are. Call it holding p.mu.
func (p *peer) takeBatch() []byte {
	buf, now := p.wbuf, p.m.mono()
	w := len(buf)
	if len(p.queued) > 0 {
		w = p.queued[0].start
	}
	for _, q := range p.queued {
		ch, waiting := p.pending[q.id]
		left := q.notAfter - now
		if waiting && left <= 0 {
			delete(p.pending, q.id)
			ch <- reply{err: errExpired}
		}
		if !waiting || left <= 0 {
			continue
		}
		frame.PutBudget(buf[q.budgetAt:], uint64(left))
		w += copy(buf[w:], buf[q.start:q.end])
	}
	p.queued = p.queued[:0]
	p.wbuf = p.spare[:0]
	p.spare = nil
	return buf[:w]
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

// peerFor returns the connection to the member called name, dialling it
// if needed.
func (m *Member) peerFor(ctx context.Context, name string) (*peer, error) {
	m.peerMu.Lock()
	p := m.peers[name]
	m.peerMu.Unlock()
	if p != nil {
		return p, nil
	}
	c, err := m.dial(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", errPeerGone, name, err)
	}
	p = &peer{m: m, name: name, c: c, pending: map[uint64]chan reply{}, wbuf: append([]byte(nil), frame.Preamble[:]...)}
	m.peerMu.Lock()
	if m.peersClosed {
		m.peerMu.Unlock()
		c.Close()
		return nil, ErrClosed
	}
	if q := m.peers[name]; q != nil {
		m.peerMu.Unlock()
		c.Close()
		return q, nil
	}
	m.peers[name] = p
	m.wg.Add(1)
	m.peerMu.Unlock()
	go p.read()
	return p, nil
}

// dial connects to the owner channel of the member called name and, when
// the channel is secured, completes the TLS handshake, within
// ChannelIOTimeout.
func (m *Member) dial(ctx context.Context, name string) (net.Conn, error) {
	addr, err := channelAddr(name)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, m.cfg.ChannelIOTimeout)
	defer cancel()
	c, err := m.cfg.dial(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	if m.trust.creds.client == nil {
		return c, nil
	}
	host, _, _ := net.SplitHostPort(addr)
	tc := tls.Client(c, m.trust.creds.dialTLS(host))
	if err := tc.HandshakeContext(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return tc, nil
}

// fail breaks the connection: every pending call gets errPeerGone.
func (p *peer) fail(err error) {
	p.mu.Lock()
	if p.err != nil {
		p.mu.Unlock()
		return
	}
	p.err = fmt.Errorf("%w: %s: %v", errPeerGone, p.name, err)
	pending := p.pending
	p.pending = nil
	p.mu.Unlock()
	p.c.Close()
	for _, ch := range pending {
		ch <- reply{err: p.err}
	}
	p.m.peerMu.Lock()
	if p.m.peers[p.name] == p {
		delete(p.m.peers, p.name)
	}
	p.m.peerMu.Unlock()
}

// read checks the owner's preamble, then delivers answers to their
// callers until the connection breaks.
func (p *peer) read() {
	defer p.m.wg.Done()
	fr := frame.NewReader(bufio.NewReaderSize(p.c, connBuf), p.c, 0, p.m.cfg.ChannelIOTimeout)
	var pre [len(frame.Preamble)]byte
	if _, err := io.ReadFull(fr, pre[:]); err != nil || pre != frame.Preamble {
		p.fail(cmpErr(err, frame.ErrPreamble))
		return
	}
	for {
		buf, err := fr.Next()
		if err != nil {
			p.fail(err)
			return
		}
		id, kind, payload, err := frame.Parse(buf)
		if err != nil {
			p.fail(err)
			return
		}
		p.mu.Lock()
		ch := p.pending[id]
		delete(p.pending, id)
		p.mu.Unlock()
		if ch != nil {
			ch <- decodeReply(kind, payload)
		}
	}
}

// cmpErr returns err, or def when err is nil.
func cmpErr(err, def error) error {
	if err != nil {
		return err
	}
	return def
}

// call sends one request (req nil for frame.KindRemove; raw, the payload after
// the key, for frame.KindMerge) and waits for its answer. budget is how long the
// caller still waits; it travels in the frame.
func (p *peer) call(ctx context.Context, kind byte, key string, req *wire.Request, raw []byte, budget time.Duration) reply {
	if budget <= 0 {
		return reply{err: context.DeadlineExceeded}
	}
	ch := replyChans.Get().(chan reply)
	p.mu.Lock()
	if p.err != nil {
		err := p.err
		p.mu.Unlock()
		replyChans.Put(ch)
		return reply{err: err}
	}
	if len(p.wbuf) >= maxPendingWrite {
		p.mu.Unlock()
		replyChans.Put(ch)
		return reply{err: errPeerBusy}
	}
	start := len(p.wbuf)
	p.wbuf = frame.AppendHeader(p.wbuf, p.nextID+1, kind)
	budgetAt := len(p.wbuf)
	p.wbuf = frame.AppendBudget(p.wbuf, uint64(budget))
	p.wbuf = frame.AppendKey(p.wbuf, key)
	if req != nil {
		p.wbuf = wire.AppendRequest(p.wbuf, req)
	}
	p.wbuf = append(p.wbuf, raw...)
	if len(p.wbuf)-start-4 > frame.Max {
		p.wbuf = p.wbuf[:start]
		p.mu.Unlock()
		replyChans.Put(ch)
		return reply{err: errTooLarge}
	}
	p.wbuf = frame.Finish(p.wbuf, start)
	p.nextID++
	id := p.nextID
	p.pending[id] = ch
	p.queued = append(p.queued, queued{id: id, start: start, end: len(p.wbuf), budgetAt: budgetAt, notAfter: p.m.mono() + int64(budget)})
	if !p.flushing {
		p.flushing = true
		p.mu.Unlock()
		runtime.Gosched() // let runnable callers append first (see peer)
		p.mu.Lock()
		for len(p.wbuf) > 0 && p.err == nil {
			buf := p.takeBatch()
			if len(buf) == 0 {
				p.spare = buf
				continue
			}
			p.mu.Unlock()
			p.c.SetWriteDeadline(time.Now().Add(p.m.cfg.ChannelIOTimeout))
			_, err := p.c.Write(buf)
			p.mu.Lock()
			if cap(buf) <= frame.KeepBuf*4 {
				p.spare = buf[:0]
			}
			if err != nil {
				p.flushing = false
				p.mu.Unlock()
				p.fail(err)
				return <-ch
			}
		}
		p.flushing = false
	}
	p.mu.Unlock()
	select {
	case r := <-ch:
		replyChans.Put(ch)
		return r
	case <-ctx.Done():
		p.mu.Lock()
		if p.pending != nil {
			delete(p.pending, id)
		}
		p.mu.Unlock()
		return reply{err: ctx.Err()}
	}
}

// remote runs a request on the owner called name (req nil for frame.KindRemove
// and frame.KindMerge; raw the payload of a merge).
func (m *Member) remote(ctx context.Context, name string, kind byte, key string, req *wire.Request, raw []byte, budget time.Duration) outcome {
	p, err := m.peerFor(ctx, name)
	if err != nil {
		return outcome{kind: frame.KindError, err: err, retry: errors.Is(err, errPeerGone)}
	}
	r := p.call(ctx, kind, key, req, raw, budget)
	if r.err != nil {
		return outcome{kind: frame.KindError, err: r.err, retry: errors.Is(r.err, errPeerGone) || errors.Is(r.err, errPeerBusy)}
	}
	switch r.kind {
	case frame.KindOK:
		if kind == frame.KindRemove || kind == frame.KindMerge {
			return outcome{kind: frame.KindOK, removed: kind == frame.KindRemove}
		}
		if !r.body {
			return outcome{kind: frame.KindError, err: frame.ErrMalformed}
		}
		return outcome{kind: frame.KindOK, resp: r.resp, grant: r.grant}
	case frame.KindNotOwner:
		return outcome{kind: frame.KindNotOwner}
	case frame.KindNoQuorum:
		return outcome{kind: frame.KindNoQuorum}
	case frame.KindHold:
		return outcome{kind: frame.KindHold, hold: r.hold}
	case frame.KindError:
		if strings.Contains(r.msg, errExpired.Error()) {
			// The owner gave up at the budget this member sent (before or
			// while executing): the caller's deadline, as a local
			// execution reports it.
			return outcome{kind: frame.KindError, err: fmt.Errorf("bucketgrid/olric: owner %s: %s: %w", name, r.msg, context.DeadlineExceeded)}
		}
		return outcome{kind: frame.KindError, err: fmt.Errorf("bucketgrid/olric: owner %s: %s", name, r.msg)}
	}
	return outcome{kind: frame.KindError, err: frame.ErrMalformed}
}
