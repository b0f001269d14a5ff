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
	"strings"
	"sync"
	"time"

	"github.com/bucketgrid/bucketgrid/core/wire"
	"github.com/bucketgrid/bucketgrid/grid/olric/internal/frame"
)

// The caller side of the owner channel: this member's connections to the
// owner channels of the other members, which carry its requests for the
// buckets they own (the owner side is channel.go).

var (
	// errPeerGone reports a broken owner-channel connection; the caller
	// re-routes and retries.
	errPeerGone = errors.New("bucketgrid/olric: owner connection lost")
	// errPeerBusy reports a connection whose writes are not draining; the
	// caller backs off and retries.
	errPeerBusy = errors.New("bucketgrid/olric: owner connection congested")
	// errTooLarge reports a request that does not fit in a frame.
	errTooLarge = errors.New("bucketgrid/olric: request larger than the owner channel's frame limit")
)

// maxPendingWrite is how many bytes of a caller's frames not yet written a
// connection may hold before further requests are refused (errPeerBusy).
const maxPendingWrite = 256 << 10

// peerPool is this member's connections to other members' owner channels,
// one per member, dialled on first use and dropped when they fail.
type peerPool struct {
	m      *Member
	mu     sync.Mutex // guards byName and closed
	byName map[string]*peer
	closed bool // the member shut down: no new connection
}

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
	// retry: a frame.KindError the owner would retry itself (see
	// errStoreFailed)
	retry bool
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
		msg := string(payload)
		return reply{kind: frame.KindError, msg: msg, retry: strings.HasPrefix(msg, errStoreFailed.Error())}
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

// get returns the connection to the member called name, dialling it if
// needed.
func (pp *peerPool) get(ctx context.Context, name string) (*peer, error) {
	pp.mu.Lock()
	p := pp.byName[name]
	pp.mu.Unlock()
	if p != nil {
		return p, nil
	}
	c, err := pp.dial(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", errPeerGone, name, err)
	}
	m := pp.m
	p = &peer{m: m, name: name, c: c, pending: map[uint64]chan reply{}, wbuf: append([]byte(nil), frame.Preamble[:]...)}
	pp.mu.Lock()
	if pp.closed {
		pp.mu.Unlock()
		c.Close()
		return nil, ErrClosed
	}
	if q := pp.byName[name]; q != nil {
		pp.mu.Unlock()
		c.Close()
		return q, nil
	}
	if pp.byName == nil {
		pp.byName = map[string]*peer{}
	}
	pp.byName[name] = p
	m.wg.Add(1)
	pp.mu.Unlock()
	go p.read()
	return p, nil
}

// drop forgets p, if it is still the connection to its member.
func (pp *peerPool) drop(p *peer) {
	pp.mu.Lock()
	if pp.byName[p.name] == p {
		delete(pp.byName, p.name)
	}
	pp.mu.Unlock()
}

// close fails every connection with ErrClosed; get dials no more.
func (pp *peerPool) close() {
	pp.mu.Lock()
	pp.closed = true
	peers := make([]*peer, 0, len(pp.byName))
	for _, p := range pp.byName {
		peers = append(peers, p)
	}
	pp.mu.Unlock()
	for _, p := range peers {
		p.fail(ErrClosed)
	}
}

// dial connects to the owner channel of the member called name and, when
// the channel is secured, completes the TLS handshake, within
// ChannelIOTimeout.
func (pp *peerPool) dial(ctx context.Context, name string) (net.Conn, error) {
	m := pp.m
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

// dialSpecial connects to the owner channel of the member called name
// (TLS when configured) and sends pre; the exchange that follows must end
// within ChannelIOTimeout.
func (pp *peerPool) dialSpecial(ctx context.Context, name string, pre [5]byte) (net.Conn, error) {
	c, err := pp.dial(ctx, name)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(pp.m.cfg.ChannelIOTimeout))
	if _, err := c.Write(pre[:]); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
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
	p.m.peers.drop(p)
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
func (pp *peerPool) remote(ctx context.Context, name string, kind byte, key string, req *wire.Request, raw []byte, budget time.Duration) outcome {
	p, err := pp.get(ctx, name)
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
		return outcome{kind: frame.KindError, err: fmt.Errorf("bucketgrid/olric: owner %s: %s", name, r.msg), retry: r.retry}
	}
	return outcome{kind: frame.KindError, err: frame.ErrMalformed}
}

// askReplicated asks member name whether it vouches, under the routing
// table of fingerprint print, for copies of every bucket of the
// partitions it owns (frame.KindReplicated, see resyncer.answer): nil
// when it does, else why not.
func (pp *peerPool) askReplicated(ctx context.Context, name string, print uint64) error {
	p, err := pp.get(ctx, name)
	if err != nil {
		return err
	}
	budget := min(remaining(ctx, time.Now().Add(pp.m.cfg.RequestTimeout)), pp.m.cfg.RequestTimeout)
	r := p.call(ctx, frame.KindReplicated, "", nil, binary.AppendUvarint(nil, print), budget)
	switch {
	case r.err != nil:
		return r.err
	case r.kind == frame.KindOK:
		return nil
	case r.kind == frame.KindError:
		return errors.New(r.msg)
	}
	return fmt.Errorf("%w: answered kind %d", frame.ErrMalformed, r.kind)
}
