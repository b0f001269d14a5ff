package netbed

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy is a userspace TCP proxy between hosts that delays every byte by
// its delay in each direction, so a round trip through it takes at least
// twice the delay. It stands in for netem, which this kernel lacks.
type Proxy struct {
	ln     net.Listener
	from   *Host
	target string
	delay  atomic.Int64

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// Proxy listens on host on (listen, e.g. on.Addr+":0") and forwards each
// connection to target, dialled from host from, delaying each direction by
// delay. It is closed when the test ends.
func (b *Bed) Proxy(on *Host, listen string, from *Host, target string, delay time.Duration) *Proxy {
	b.t.Helper()
	ln, err := on.Listen("tcp", listen)
	if err != nil {
		b.t.Fatalf("netbed: proxy: %v", err)
	}
	p := &Proxy{ln: ln, from: from, target: target, conns: map[net.Conn]struct{}{}}
	p.delay.Store(int64(delay))
	b.mu.Lock()
	b.proxies = append(b.proxies, p)
	b.mu.Unlock()
	p.wg.Add(1)
	go p.accept()
	return p
}

// Addr returns the address the proxy listens on.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetDelay changes the one-way delay of data read from now on.
func (p *Proxy) SetDelay(d time.Duration) { p.delay.Store(int64(d)) }

// Close stops the proxy and closes every connection through it.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}

// track registers c, or closes it and reports false once the proxy closed.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(in) {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			out, err := p.from.Dial(ctx, "tcp", p.target)
			cancel()
			if err != nil || !p.track(out) {
				in.Close()
				return
			}
			var wg sync.WaitGroup
			wg.Go(func() { p.pipe(out, in) })
			wg.Go(func() { p.pipe(in, out) })
			wg.Wait()
			in.Close()
			out.Close()
			p.mu.Lock()
			delete(p.conns, in)
			delete(p.conns, out)
			p.mu.Unlock()
		}()
	}
}

// chunk is data read at some time, to be written delay later.
type chunk struct {
	due  time.Time
	data []byte
}

// pipe copies src to dst, each read written its delay after it was read,
// in order. A read error ends it with a half close of dst (both on error).
func (p *Proxy) pipe(dst, src net.Conn) {
	q := make(chan chunk, 1024)
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(q)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				q <- chunk{due: time.Now().Add(time.Duration(p.delay.Load())), data: buf[:n]}
			}
			if err != nil {
				return
			}
		}
	})
	failed := false
	for c := range q {
		if failed {
			continue
		}
		if d := time.Until(c.due); d > 0 {
			time.Sleep(d)
		}
		if _, err := dst.Write(c.data); err != nil {
			failed = true
			src.Close()
		}
	}
	wg.Wait()
	if tc, ok := dst.(*net.TCPConn); ok && !failed {
		tc.CloseWrite()
	} else {
		dst.Close()
	}
}
