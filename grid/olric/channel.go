package olric

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/bucketgrid/bucketgrid/core"
)

// errPeerGone reports a broken owner-channel connection; the caller
// re-routes and retries.
var errPeerGone = errors.New("bucketgrid/olric: owner connection lost")

// ---- owner side ----

// serve accepts owner-channel connections until the listener closes.
func (m *Member) serve() {
	defer m.wg.Done()
	for {
		c, err := m.ln.Accept()
		if err != nil {
			return
		}
		m.connMu.Lock()
		if m.connsClosed {
			m.connMu.Unlock()
			c.Close()
			return
		}
		m.conns[c] = struct{}{}
		m.connMu.Unlock()
		m.wg.Add(1)
		go m.serveConn(c)
	}
}

// serveConn reads requests from one caller and executes them in order on
// this goroutine; answers go out in one write per batch of requests that
// arrived together (it flushes when no further request is buffered).
func (m *Member) serveConn(c net.Conn) {
	defer m.wg.Done()
	// One context per connection: a context per request would make every
	// request contend on the member context's lock.
	ctx, cancel := context.WithCancel(m.ctx)
	defer func() {
		cancel()
		c.Close()
		m.connMu.Lock()
		delete(m.conns, c)
		m.connMu.Unlock()
	}()
	r := bufio.NewReaderSize(c, 32<<10)
	w := bufio.NewWriterSize(c, 32<<10)
	var buf, out []byte
	for {
		var err error
		if buf, err = readFrame(r, buf); err != nil {
			return
		}
		id, kind, payload, err := parseFrame(buf)
		if err != nil || (kind != kindExecute && kind != kindRemove) {
			return
		}
		key, rest, err := parseKey(payload)
		if err != nil {
			return
		}
		var req core.Request
		if kind == kindExecute {
			req, err = core.DecodeRequest(rest)
		}
		if err != nil {
			out = appendErrorFrame(out[:0], id, err)
		} else {
			o := m.execOwner(ctx, key, m.hash(key), &req, kind == kindRemove)
			out = o.appendFrame(out[:0], id)
		}
		if _, err := w.Write(out); err != nil {
			return
		}
		if r.Buffered() == 0 {
			if err := w.Flush(); err != nil {
				return
			}
		}
	}
}

func appendErrorFrame(dst []byte, id uint64, err error) []byte {
	start := len(dst)
	dst = appendFrameHeader(dst, id, kindError)
	dst = append(dst, err.Error()...)
	return finishFrame(dst, start)
}

// appendFrame encodes an owner outcome as the answer to request id.
func (o *outcome) appendFrame(dst []byte, id uint64) []byte {
	start := len(dst)
	switch o.kind {
	case kindOK:
		dst = appendFrameHeader(dst, id, kindOK)
		if !o.removed {
			dst = core.AppendResponse(dst, &o.resp)
		}
	case kindHold:
		dst = appendFrameHeader(dst, id, kindHold)
		dst = binary.AppendUvarint(dst, uint64(o.hold))
	case kindNotOwner:
		dst = appendFrameHeader(dst, id, kindNotOwner)
	default:
		return appendErrorFrame(dst, id, o.err)
	}
	return finishFrame(dst, start)
}

// ---- caller side ----

// reply is an owner's answer as the caller receives it.
type reply struct {
	kind    byte
	payload []byte
	err     error
}

// peer is a multiplexed connection to another member's owner channel.
//
// Writes are combined: a caller appends its frame to wbuf and, unless
// another caller is already writing, writes wbuf itself, again and again
// while frames keep arriving. Callers that arrive during a write ride along
// with the next one, so a busy connection carries many frames per system
// call without a writer goroutine.
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
	flushing bool
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
	addr, err := m.channelAddr(ctx, name)
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		m.addrs.Delete(name)
		return nil, fmt.Errorf("%w: %v", errPeerGone, err)
	}
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	p = &peer{m: m, name: name, c: c, pending: map[uint64]chan reply{}}
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

// channelAddr returns the owner-channel address that member name published.
func (m *Member) channelAddr(ctx context.Context, name string) (string, error) {
	if a, ok := m.addrs.Load(name); ok {
		return a.(string), nil
	}
	gr, err := m.registry.Get(ctx, name)
	if err != nil {
		return "", fmt.Errorf("%w: no channel address for %s: %v", errPeerGone, name, err)
	}
	a, err := gr.String()
	if err != nil {
		return "", err
	}
	m.addrs.Store(name, a)
	return a, nil
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

// read delivers answers to their callers until the connection breaks.
func (p *peer) read() {
	defer p.m.wg.Done()
	r := bufio.NewReaderSize(p.c, 32<<10)
	var buf []byte
	for {
		var err error
		if buf, err = readFrame(r, buf); err != nil {
			p.fail(err)
			return
		}
		id, kind, payload, err := parseFrame(buf)
		if err != nil {
			p.fail(err)
			return
		}
		p.mu.Lock()
		ch := p.pending[id]
		delete(p.pending, id)
		p.mu.Unlock()
		if ch != nil {
			ch <- reply{kind: kind, payload: append([]byte(nil), payload...)}
		}
	}
}

// call sends one request and waits for its answer.
func (p *peer) call(ctx context.Context, kind byte, key string, req []byte) reply {
	ch := make(chan reply, 1)
	p.mu.Lock()
	if p.err != nil {
		err := p.err
		p.mu.Unlock()
		return reply{err: err}
	}
	p.nextID++
	id := p.nextID
	p.pending[id] = ch
	start := len(p.wbuf)
	p.wbuf = appendFrameHeader(p.wbuf, id, kind)
	p.wbuf = appendKey(p.wbuf, key)
	p.wbuf = append(p.wbuf, req...)
	p.wbuf = finishFrame(p.wbuf, start)
	if !p.flushing {
		p.flushing = true
		for len(p.wbuf) > 0 && p.err == nil {
			buf := p.wbuf
			p.wbuf = p.spare[:0]
			p.mu.Unlock()
			_, err := p.c.Write(buf)
			p.mu.Lock()
			p.spare = buf[:0]
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

// remote runs a request on the owner called name.
func (m *Member) remote(ctx context.Context, name string, kind byte, key string, req []byte) outcome {
	p, err := m.peerFor(ctx, name)
	if err != nil {
		return outcome{kind: kindError, err: err, retry: errors.Is(err, errPeerGone)}
	}
	r := p.call(ctx, kind, key, req)
	if r.err != nil {
		return outcome{kind: kindError, err: r.err, retry: errors.Is(r.err, errPeerGone)}
	}
	switch r.kind {
	case kindOK:
		if kind == kindRemove {
			return outcome{kind: kindOK, removed: true}
		}
		resp, err := core.DecodeResponse(r.payload)
		if err != nil {
			return outcome{kind: kindError, err: err}
		}
		return outcome{kind: kindOK, resp: resp}
	case kindNotOwner:
		return outcome{kind: kindNotOwner}
	case kindHold:
		d, n := binary.Uvarint(r.payload)
		if n <= 0 {
			return outcome{kind: kindError, err: errFrame}
		}
		return outcome{kind: kindHold, hold: int64(min(d, uint64(time.Hour)))}
	case kindError:
		return outcome{kind: kindError, err: fmt.Errorf("bucketgrid/olric: owner %s: %s", name, r.payload)}
	}
	return outcome{kind: kindError, err: errFrame}
}
