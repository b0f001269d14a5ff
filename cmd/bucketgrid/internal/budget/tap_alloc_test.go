package budget

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/tap"
)

// TestTapFormatsNoAddress: a call on a followed connection finds its
// connection and its peer's address without formatting an address per
// call (gRPC's tap runs for every check): it allocates what the call holds
// (its grant, cut channel and context) and no more, and its bytes count to
// its peer's host and its connection until the call ends; a closed
// connection is forgotten both ways.
func TestTapFormatsNoAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	sc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	b := New(1 << 40)
	fc := b.follow(sc)
	defer fc.Close()
	// gRPC puts one peer, of the connection's addresses, in all its calls' contexts
	p := &peer.Peer{Addr: fc.RemoteAddr(), LocalAddr: fc.LocalAddr()}
	call, end := context.WithCancel(peer.NewContext(context.Background(), p))
	defer end()
	const method = "/m"
	handle := b.tap(100, Methods{Main: []string{method}, Answer: []string{method}, Stream: 10})
	info := &tap.Info{FullMethodName: method}
	var calls int64
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := handle(call, info); err != nil {
			t.Fatal(err)
		}
		calls++
	})
	if allocs > 6 { // 15 when every call formatted its connection's addresses (three times)
		t.Errorf("%v allocations per call, want at most 6 (grant, cut channel, AfterFunc's context, release and stop functions, value context)", allocs)
	}
	b.mu.Lock()
	byHost, byConn := b.peers["127.0.0.1"], b.conns[p]
	b.mu.Unlock()
	if byHost != calls*100 || byConn != calls*100 || b.Used() != calls*100 {
		t.Fatalf("%d calls of 100 bytes: host holds %d, connection %d, budget %d", calls, byHost, byConn, b.Used())
	}
	end()
	deadline := time.Now().Add(time.Minute)
	for b.Used() != 0 { // AfterFunc runs on its own goroutine
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes still held a minute after the calls ended", b.Used())
		}
		time.Sleep(time.Millisecond)
	}
	b.mu.Lock()
	if len(b.peers) != 0 || len(b.conns) != 0 {
		t.Fatalf("after the calls: peers %v, connections %v", b.peers, b.conns)
	}
	b.mu.Unlock()
	fc.Close()
	b.followMu.Lock()
	defer b.followMu.Unlock()
	if len(b.followConns) != 0 || len(b.followPeers) != 0 {
		t.Fatalf("a closed connection still followed: %d by addresses, %d by peer", len(b.followConns), len(b.followPeers))
	}
}
