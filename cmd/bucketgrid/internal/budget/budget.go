// Package budget bounds the bytes that every connection of the rate-limit
// service together may make it hold: request messages and bodies in flight.
// The limits of one connection (its calls, windows, message and body sizes)
// multiply by the connections; a Budget is the total over all of them.
//
// A request takes its share from the Budget before the service reads any
// of it, or is refused at once (gRPC RESOURCE_EXHAUSTED, or an answer
// of the call's own that refuses, HTTP 503):
// nothing waits for room, so a full budget never queues requests, and no
// request is served without its share. A gRPC call on a connection the
// Budget follows (Listener, Credentials) takes a fixed amount at its
// headers and then the bytes of its DATA frames as they arrive, and is cut
// when they find no room; a call on any other connection takes its worst
// case at its headers. Once its message is decoded, a gRPC call settles for
// what it still holds; everything goes back when the request ends.
//
// Once half of a Budget is taken, a peer address that holds an eighth of
// it, or a connection that holds a thirty-second, takes no more (see
// Budget), so the clients of one address cannot fill it for everyone.
package budget

import (
	"context"
	"encoding/binary"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// Budget is a count of bytes that requests in flight take and give back.
// It is safe for concurrent use.
//
// Once half of it is taken, a peer address that holds an eighth of it, or
// a connection that holds a thirty-second, takes no more: a client, however
// many connections it opens from one address, leaves the rest to the
// others.
type Budget struct {
	limit                            int64
	used                             atomic.Int64
	others                           atomic.Int64 // held by calls of methods other than Methods.Main, when it names some
	answered, exhausted, unavailable atomic.Int64 // refusals, by answer (see Refusals)
	shared                           atomic.Int64 // refusals over a peer's or a connection's share

	mu    sync.Mutex
	peers map[string]int64     // held by each peer address (host only)
	conns map[*peer.Peer]int64 // held by each connection (gRPC puts one *peer.Peer in all its calls' contexts)

	followMu    sync.Mutex
	followConns map[connKey]*frameConn    // the followed connections (Listener, Credentials) open now
	followPeers map[*peer.Peer]*frameConn // the same, by gRPC's peer of their calls, once a call found them
}

// peerShare and connShare are the shares of a budget, as fractions
// 1/peerShare and 1/connShare, beyond which a peer address and a
// connection take no more once half of the budget is taken: a client from
// one address alone stops at half of it, and clients from other addresses
// find the rest, each taking at least one request.
const (
	peerShare = 8
	connShare = 32
)

// New returns a budget of limit bytes.
func New(limit int64) *Budget {
	return &Budget{limit: limit, peers: map[string]int64{}, conns: map[*peer.Peer]int64{},
		followConns: map[connKey]*frameConn{}, followPeers: map[*peer.Peer]*frameConn{}}
}

// take takes n bytes if they fit, and reports whether they did.
func (b *Budget) take(n int64) bool {
	if b.used.Add(n) > b.limit {
		b.used.Add(-n)
		return false
	}
	return true
}

// give returns n bytes.
func (b *Budget) give(n int64) { b.used.Add(-n) }

// Used returns the bytes taken now.
func (b *Budget) Used() int64 { return b.used.Load() }

// Limit returns the bytes the budget holds.
func (b *Budget) Limit() int64 { return b.limit }

// Refusals counts the requests that found the budget full, by how they
// were answered.
type Refusals struct {
	// Answered counts calls of a method named in Methods.Answer, let
	// through to be answered at once without their message being read
	// (a rate-limit check answered OVER_LIMIT).
	Answered int64
	// Exhausted counts the other gRPC calls, refused RESOURCE_EXHAUSTED.
	Exhausted int64
	// HTTP counts HTTP requests answered 503.
	HTTP int64
	// Shared counts, of the refusals above, those that found room in the
	// budget but not in their peer address's or connection's share.
	Shared int64
}

// Total returns every refusal, however answered.
func (r Refusals) Total() int64 { return r.Answered + r.Exhausted + r.HTTP }

// Refusals returns how many requests found the budget full.
func (b *Budget) Refusals() Refusals {
	return Refusals{Answered: b.answered.Load(), Exhausted: b.exhausted.Load(), HTTP: b.unavailable.Load(),
		Shared: b.shared.Load()}
}

// grant is what one request holds; held < 0 once given back. A grant
// whose share is set holds its bytes in that share as well, and one with
// an owner in its peer's and connection's counts. A grant on a followed
// connection (see Listener) grows by the bytes of its stream's DATA
// frames as they arrive; one that finds no room for them is cut.
type grant struct {
	b      *Budget
	share  *atomic.Int64
	owner  owner
	mu     sync.Mutex
	held   int64
	stop   func() bool   // unregisters the release at the context's end (see Done)
	cut    chan struct{} // closed once cut
	cancel context.CancelFunc
	conn   *frameConn // the followed connection, and the stream on it
	stream uint32

	// The call's message as its stream's DATA frames are handed out, by
	// the connection's reading goroutine alone: its prefix and the data
	// bytes so far. arrived is set once they hold the whole message or
	// the stream has ended.
	msgHdr   [msgHdrLen]byte
	nMsgHdr  int
	data     int64
	complete bool        // handed out in full (the reading goroutine's)
	arrived  atomic.Bool // and handled by gRPC (see frameConn.Read)
}

// received counts n more data bytes of the call's stream, end if its
// END_STREAM came with them, and reports whether that completed its
// message (the first time only).
func (g *grant) received(n int64, end bool) bool {
	g.data += n
	if g.complete {
		return false
	}
	g.complete = end || g.nMsgHdr == msgHdrLen && g.data >= msgHdrLen+int64(binary.BigEndian.Uint32(g.msgHdr[1:]))
	return g.complete
}

func (g *grant) give(n int64) {
	g.b.give(n)
	if g.share != nil {
		g.share.Add(-n)
	}
	g.b.owned(g.owner, -n)
}

func (g *grant) settle(n int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.held < 0 || n >= g.held {
		return // given back, or settling would take more
	}
	g.give(g.held - n)
	g.held = n
}

// grow takes n more bytes, which the service holds already: they are
// counted whether they fit or not, and a grant they do not fit (in the
// budget, or in its share once half of it is taken) is cut.
func (g *grant) grow(n int64) {
	g.mu.Lock()
	if g.held < 0 {
		g.mu.Unlock()
		return // given back: gRPC drops the data of a stream it has closed
	}
	g.held += n
	fits := g.b.charge(g.owner, n, g.share)
	g.mu.Unlock()
	if !fits {
		g.doCut()
	}
}

// doCut tells the call it has no room for its message: a handler that
// answers (see Cut) answers it, any other call is cancelled.
func (g *grant) doCut() {
	g.mu.Lock()
	select {
	case <-g.cut:
		g.mu.Unlock()
		return
	default:
	}
	close(g.cut)
	g.mu.Unlock()
	if g.cancel != nil {
		g.b.exhausted.Add(1)
		g.cancel()
	} else {
		g.b.answered.Add(1)
	}
}

func (g *grant) release() {
	g.mu.Lock()
	old := g.held
	g.held = -1
	if old > 0 {
		g.give(old)
	}
	g.mu.Unlock()
	if g.conn != nil {
		g.conn.forget(g.stream, g)
	}
}

type grantKey struct{}

// owner is who holds a grant: a peer address and a connection, either
// unknown (empty, nil).
type owner struct {
	addr string
	conn *peer.Peer
}

// ownerOf returns the owner of the gRPC call of ctx, on fc if the call's
// connection is followed (nil if not), whose peer's host is known.
func ownerOf(ctx context.Context, fc *frameConn) owner {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return owner{}
	}
	if fc != nil {
		return owner{addr: fc.host, conn: p}
	}
	return owner{addr: host(p.Addr.String()), conn: p}
}

// host is addr without its port.
func host(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

// owned adds n to o's counts, forgetting a count that falls to 0.
func (b *Budget) owned(o owner, n int64) {
	if o == (owner{}) {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if o.addr != "" {
		if b.peers[o.addr] += n; b.peers[o.addr] <= 0 {
			delete(b.peers, o.addr)
		}
	}
	if o.conn != nil {
		if b.conns[o.conn] += n; b.conns[o.conn] <= 0 {
			delete(b.conns, o.conn)
		}
	}
}

// takeAs takes n bytes for o if they fit in the budget and, once half of
// it is taken, o holds less than its shares; shared reports a refusal by
// a share.
func (b *Budget) takeAs(o owner, n int64) (ok, shared bool) {
	if o == (owner{}) {
		return b.take(n), false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.take(n) {
		return false, false
	}
	if b.used.Load() > b.limit/2 &&
		(b.peers[o.addr] >= b.limit/peerShare || b.conns[o.conn] >= b.limit/connShare) {
		b.give(n)
		return false, true
	}
	if o.addr != "" {
		b.peers[o.addr] += n
	}
	if o.conn != nil {
		b.conns[o.conn] += n
	}
	return true, false
}

// charge counts n bytes for o (and in share) whether they fit or not, and
// reports whether they did as takeAs and reserve would have.
func (b *Budget) charge(o owner, n int64, share *atomic.Int64) bool {
	fits := true
	if share != nil && share.Add(n) > b.limit/2 {
		fits = false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	used := b.used.Add(n)
	if used > b.limit || (used > b.limit/2 && o != (owner{}) &&
		(b.peers[o.addr] >= b.limit/peerShare || b.conns[o.conn] >= b.limit/connShare)) {
		fits = false
	}
	if o.addr != "" {
		b.peers[o.addr] += n
	}
	if o.conn != nil {
		b.conns[o.conn] += n
	}
	return fits
}

// reserve takes n bytes for the request of ctx, on the followed
// connection fc (nil if not), until ctx ends. With a share, the bytes are
// also counted in it, which may hold at most half the budget. shared
// reports a refusal by the peer's or connection's share.
func (b *Budget) reserve(ctx context.Context, fc *frameConn, n int64, share *atomic.Int64) (_ context.Context, ok, shared bool) {
	if share != nil {
		if share.Add(n) > b.limit/2 {
			share.Add(-n)
			return ctx, false, false
		}
	}
	o := ownerOf(ctx, fc)
	if ok, shared = b.takeAs(o, n); !ok {
		if share != nil {
			share.Add(-n)
		}
		return ctx, false, shared
	}
	g := &grant{b: b, share: share, owner: o, held: n, cut: make(chan struct{})}
	g.stop = context.AfterFunc(ctx, g.release)
	return context.WithValue(ctx, grantKey{}, g), true, false
}

// Done gives back at once what the request of ctx holds, instead of when
// ctx ends, for a handler that is done with its request: a gRPC call whose
// message it read in full (nothing of it waits in gRPC's buffers) and
// answered. The release at ctx's end is dropped, and with it the goroutine
// it would start. A handler that answered without reading its message must
// not call it: the message holds its bytes until gRPC ends the stream. It
// does nothing for a context without a reservation.
func Done(ctx context.Context) {
	if g, ok := ctx.Value(grantKey{}).(*grant); ok && g.stop() {
		g.release()
	}
}

// Settle lowers what the request of ctx holds to n bytes, once what it
// had reserved for is no longer held (a gRPC call's message, decoded). It
// never raises it, and does nothing for a context without a reservation.
func Settle(ctx context.Context, n int64) {
	if g, ok := ctx.Value(grantKey{}).(*grant); ok {
		g.settle(n)
	}
}

// ErrExhausted is the status of a gRPC call refused for want of room.
var ErrExhausted = status.Error(codes.ResourceExhausted, "the service holds its whole memory budget for requests in flight; retry")

// Methods say how GRPC treats the calls of each method (full names,
// "/package.Service/Method").
type Methods struct {
	// Main are the methods the budget is for. When Main names some, the
	// calls of every other method together hold at most half the budget.
	// Those calls can be streams that stay open as long as their client
	// likes (a health Watch, server reflection), and without the cap
	// enough of them would leave no room for the main methods.
	Main []string
	// Answer are the methods, of Main, whose calls are not refused with
	// an error when they find no room: they reach their handler with
	// Exhausted true, and the handler answers them without reading their
	// message. An error is what a proxy may let through (Envoy's
	// failure_mode_deny: false does), so a method whose answer can refuse
	// (a rate-limit check answered OVER_LIMIT) must not get one from a
	// client that fills the budget.
	Answer []string
	// Stream is what a call on a followed connection takes at its
	// headers, before the bytes of its message: what its stream costs
	// the service (its state, header block, handler).
	Stream int64
}

// GRPC returns the server option that takes bytes for every call when
// its headers arrive, before any of its message is read, and gives them
// back when the call ends; a call that finds no room (in the budget, or in
// its peer address's or connection's share) is refused with
// RESOURCE_EXHAUSTED and its stream reset, so its data is never buffered,
// unless m.Answer names its method.
//
// A call on a connection the budget follows (Listener, Credentials) takes
// m.Stream, what its stream costs the service before any of its message,
// and then the bytes of its DATA frames as they arrive, until its handler
// settles (see Settle); a call those bytes do not fit is cut (see Cut).
// A call on any other connection takes perCall, what it can make the
// server hold: its flow-control window of unread bytes and a message
// being assembled.
func (b *Budget) GRPC(perCall int64, m Methods) grpc.ServerOption {
	return grpc.InTapHandle(b.tap(perCall, m))
}

// tap is GRPC's tap handle.
func (b *Budget) tap(perCall int64, m Methods) tap.ServerInHandle {
	return func(ctx context.Context, info *tap.Info) (context.Context, error) {
		answered := slices.Contains(m.Answer, info.FullMethodName)
		var share *atomic.Int64
		if len(m.Main) > 0 && !slices.Contains(m.Main, info.FullMethodName) {
			share = &b.others
		}
		// The tap runs on the connection's reading goroutine, which has
		// read up to the end of this call's HEADERS and no further.
		n := perCall
		fc := b.followed(ctx)
		stream, opening := fc.opening()
		if opening {
			n = m.Stream
		}
		var cancel context.CancelFunc
		if !answered {
			ctx, cancel = context.WithCancel(ctx)
		}
		rctx, ok, shared := b.reserve(ctx, fc, n, share)
		if ok {
			g := rctx.Value(grantKey{}).(*grant)
			g.cancel = cancel // a grant is cut only on a followed connection
			if opening {
				fc.adopt(stream, g)
			}
			return rctx, nil
		}
		if cancel != nil {
			cancel()
		}
		if shared {
			b.shared.Add(1)
		}
		if answered {
			b.answered.Add(1)
			return context.WithValue(ctx, exhaustedKey{}, true), nil
		}
		b.exhausted.Add(1)
		return ctx, ErrExhausted
	}
}

// Cut returns a channel closed once the call of ctx, let through with
// room for its headers, found none for the bytes of its message: its
// handler, of a method named to GRPC's answer, must answer it as it
// answers a call that found the budget full, without waiting for the rest
// of its message. A call of any other method is cancelled instead. It
// returns nil for a context without a reservation.
func Cut(ctx context.Context) <-chan struct{} {
	if g, ok := ctx.Value(grantKey{}).(*grant); ok {
		return g.cut
	}
	return nil
}

// Arrived reports whether the first message of the call of ctx, on a
// connection the budget follows, has been handed to gRPC in full, or its
// stream ended before it, and gRPC has since asked the connection for more
// bytes, which it does only once it has passed on those it had: reading
// the message then waits on nothing. It reports false when it cannot tell
// (a call on any other connection) and while gRPC's reader has not come
// back for more (a reader stopped by its throttle, as for a client that
// does not read its answers, never makes a call's message arrived).
func Arrived(ctx context.Context) bool {
	g, ok := ctx.Value(grantKey{}).(*grant)
	return ok && g.arrived.Load()
}

type exhaustedKey struct{}

// Exhausted reports whether the call of ctx found the budget full and was
// let through to its handler (a method named to GRPC's answer) only to be
// answered at once: its handler must not read its message.
func Exhausted(ctx context.Context) bool {
	if v, _ := ctx.Value(exhaustedKey{}).(bool); v {
		return true
	}
	select {
	case <-Cut(ctx):
		return true
	default:
		return false
	}
}

// HTTP returns h with every request taking its body's bytes (as its
// Content-Length says, at most maxBody; maxBody when it says nothing) for
// as long as h runs, counted in its peer address's share; a request that
// finds no room is answered 503 with
// Retry-After: 1 and its body is never read.
func (b *Budget) HTTP(h http.Handler, maxBody int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := maxBody
		if r.ContentLength >= 0 && r.ContentLength < n {
			n = r.ContentLength
		}
		o := owner{addr: host(r.RemoteAddr)}
		ok, shared := b.takeAs(o, n)
		if !ok {
			if shared {
				b.shared.Add(1)
			}
			b.unavailable.Add(1)
			w.Header().Set("Retry-After", "1")
			w.Header().Set("Connection", "close") // the unread body goes with the connection
			http.Error(w, "the service holds its whole memory budget for requests in flight ("+
				strconv.FormatInt(b.limit, 10)+" bytes); retry", http.StatusServiceUnavailable)
			return
		}
		defer func() { b.give(n); b.owned(o, -n) }()
		h.ServeHTTP(w, r)
	})
}
