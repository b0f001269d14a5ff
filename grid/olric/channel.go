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

// frameWriter owns the write side of a connection: frames queued by any
// goroutine are written in batches, one flush per batch, so concurrent
// requests (or responses) share system calls.
type frameWriter struct {
	out  chan []byte
	done chan struct{}
}

func newFrameWriter() *frameWriter {
	return &frameWriter{out: make(chan []byte, 512), done: make(chan struct{})}
}

// send queues a frame; false when the connection is gone.
func (w *frameWriter) send(f []byte) bool {
	select {
	case w.out <- f:
		return true
	case <-w.done:
		return false
	}
}

// run writes frames until done closes or a write fails.
func (w *frameWriter) run(c net.Conn, fail func(error)) {
	bw := bufio.NewWriterSize(c, 32<<10)
	for {
		var f []byte
		select {
		case f = <-w.out:
		case <-w.done:
			return
		}
		if _, err := bw.Write(f); err != nil {
			fail(err)
			return
		}
	batch:
		for {
			select {
			case f = <-w.out:
				if _, err := bw.Write(f); err != nil {
					fail(err)
					return
				}
			default:
				break batch
			}
		}
		if err := bw.Flush(); err != nil {
			fail(err)
			return
		}
	}
}

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

// serveConn reads requests from one caller and answers each as soon as it
// is done, in any order.
func (m *Member) serveConn(c net.Conn) {
	defer m.wg.Done()
	w := newFrameWriter()
	var once sync.Once
	stop := func(error) {
		once.Do(func() {
			close(w.done)
			c.Close()
		})
	}
	var handlers sync.WaitGroup
	defer func() {
		stop(nil)
		handlers.Wait()
		m.connMu.Lock()
		delete(m.conns, c)
		m.connMu.Unlock()
	}()
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		w.run(c, stop)
	}()
	r := bufio.NewReaderSize(c, 32<<10)
	var buf []byte
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
			if req, err = core.DecodeRequest(rest); err != nil {
				w.send(errorFrame(id, err))
				continue
			}
		}
		handlers.Add(1)
		go func() {
			defer handlers.Done()
			ctx, cancel := context.WithTimeout(m.ctx, m.cfg.RequestTimeout)
			o := m.execOwner(ctx, key, m.hash(key), &req, kind == kindRemove)
			cancel()
			w.send(o.frame(id))
		}()
	}
}

func errorFrame(id uint64, err error) []byte {
	f := appendFrameHeader(nil, id, kindError)
	f = append(f, err.Error()...)
	return finishFrame(f, 0)
}

// frame encodes an owner outcome as the answer to request id.
func (o *outcome) frame(id uint64) []byte {
	switch o.kind {
	case kindOK:
		f := appendFrameHeader(make([]byte, 0, 64), id, kindOK)
		if !o.removed {
			f = core.AppendResponse(f, &o.resp)
		}
		return finishFrame(f, 0)
	case kindHold:
		f := appendFrameHeader(make([]byte, 0, 16), id, kindHold)
		f = binary.AppendUvarint(f, uint64(o.hold))
		return finishFrame(f, 0)
	case kindNotOwner:
		return finishFrame(appendFrameHeader(make([]byte, 0, 16), id, kindNotOwner), 0)
	}
	return errorFrame(id, o.err)
}

// ---- caller side ----

// reply is an owner's answer as the caller receives it.
type reply struct {
	kind    byte
	payload []byte
	err     error
}

// peer is a multiplexed connection to another member's owner channel.
type peer struct {
	m    *Member
	name string
	c    net.Conn
	w    *frameWriter

	mu      sync.Mutex
	nextID  uint64
	pending map[uint64]chan reply
	err     error
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
	p = &peer{m: m, name: name, c: c, w: newFrameWriter(), pending: map[uint64]chan reply{}}
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
	m.wg.Add(2)
	m.peerMu.Unlock()
	go func() {
		defer m.wg.Done()
		p.w.run(c, p.fail)
	}()
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
	close(p.w.done)
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
	p.mu.Unlock()
	f := appendFrameHeader(make([]byte, 0, 16+len(key)+len(req)), id, kind)
	f = appendKey(f, key)
	f = append(f, req...)
	if !p.w.send(finishFrame(f, 0)) {
		p.mu.Lock()
		err := p.err
		p.mu.Unlock()
		return reply{err: err}
	}
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
