package olric

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/core/wire"
)

// openChannel connects to m's owner channel in plain TCP, sends data and
// returns the connection with a reader past the member's preamble (or nil
// if the member sent none).
func openChannel(t *testing.T, m *Member, data []byte) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", m.ChannelAddr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Write(data); err != nil {
		t.Fatal(err)
	}
	return c, bufio.NewReader(c)
}

// closedWithin reports whether the member hangs up on c within d (reading
// and discarding whatever it sends).
func closedWithin(c net.Conn, r *bufio.Reader, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, r)
	var ne net.Error
	return err == nil || !(errors.As(err, &ne) && ne.Timeout())
}

// TestChannelDeadlines checks the owner's read deadlines: a connection
// that never completes its handshake, one that stops in the middle of a
// frame, and one that sends nothing after its preamble are closed, each
// by its own deadline.
func TestChannelDeadlines(t *testing.T) {
	ms := startCluster(t, 1, func(c *Config) {
		c.ChannelIOTimeout = 300 * time.Millisecond
		c.ChannelIdleTimeout = time.Hour
	})
	m := ms[0]
	half := binary.BigEndian.AppendUint32(append(preamble[:], nil...), 100)
	half = append(half, 1, 2, 3)
	for _, tc := range []struct {
		name string
		send []byte
	}{
		{"silent", nil},
		{"half a preamble", preamble[:2]},
		{"half a frame", half},
		{"half a header", append(preamble[:], 0, 0)},
	} {
		c, r := openChannel(t, m, tc.send)
		if !closedWithin(c, r, 10*time.Second) {
			t.Errorf("%s: still open 10 s after a 300 ms deadline", tc.name)
		}
	}
	// Idle after the preamble: the idle deadline (an hour) applies, not
	// the frame deadline; a request still gets its answer.
	c, r := openChannel(t, m, preamble[:])
	time.Sleep(time.Second) // longer than ChannelIOTimeout, on purpose
	cfg := testBucket(5)
	req := wire.AppendRequest(nil, new(consumeReq(&cfg, 1)))
	if _, err := c.Write(requestFrame(1, kindExecute, 5*time.Second, "idle", req)); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var pre [len(preamble)]byte
	if _, err := io.ReadFull(r, pre[:]); err != nil {
		t.Fatalf("idle connection closed before its idle deadline: %v", err)
	}
	if _, err := (&frameReader{r: r}).next(); err != nil {
		t.Fatalf("no answer on an idle connection: %v", err)
	}

	ms = startCluster(t, 1, func(c *Config) { c.ChannelIdleTimeout = 300 * time.Millisecond })
	c, r = openChannel(t, ms[0], preamble[:])
	if !closedWithin(c, r, 10*time.Second) {
		t.Error("idle connection open 10 s after a 300 ms idle deadline")
	}
}

// TestExpiredRequestsDropped sends an owner a request whose caller has no
// time left: it is answered with an error and not executed.
func TestExpiredRequestsDropped(t *testing.T) {
	m := startCluster(t, 1, nil)[0]
	cfg := testBucket(5)
	consume := wire.AppendRequest(nil, new(consumeReq(&cfg, 3)))
	avail := wire.AppendRequest(nil, new(availableReq(&cfg)))
	f := append(preamble[:], requestFrame(1, kindExecute, 1, "late", consume)...) // 1 ns left
	f = append(f, requestFrame(2, kindExecute, 5*time.Second, "late", avail)...)
	c, r := openChannel(t, m, f)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var pre [len(preamble)]byte
	if _, err := io.ReadFull(r, pre[:]); err != nil {
		t.Fatal(err)
	}
	fr := &frameReader{r: r}
	for range 2 {
		body, err := fr.next()
		if err != nil {
			t.Fatal(err)
		}
		id, kind, payload, _ := parseFrame(body)
		switch id {
		case 1:
			if kind != kindError || !strings.Contains(string(payload), "expired") {
				t.Errorf("expired request: kind %d %q, want an expiry error", kind, payload)
			}
		case 2:
			resp, err := wire.DecodeResponse(payload)
			if kind != kindOK || err != nil || resp.Results[0].Tokens != 5 {
				t.Errorf("after the expired request: kind %d %v %v, want 5 tokens", kind, resp.Results, err)
			}
		}
	}
}

// TestPeerWriteBounds runs a caller against an owner that reads nothing:
// its pending frames stop at maxPendingWrite (errPeerBusy, retried by the
// caller) and the write blocked on the owner ends at ChannelIOTimeout,
// failing the connection (errPeerGone, re-routed and retried).
func TestPeerWriteBounds(t *testing.T) {
	m := &Member{peers: map[string]*peer{}}
	m.cfg.ChannelIOTimeout = 2 * time.Second
	caller, owner := net.Pipe()
	defer owner.Close()
	p := &peer{m: m, name: "stuck", c: caller, pending: map[uint64]chan reply{}}
	big := largestRequest(t)
	size := len(wire.AppendRequest(nil, &big))
	first := make(chan reply, 1)
	go func() { first <- p.call(context.Background(), kindExecute, "k", &big, nil, time.Minute) }()
	// Wait until the first call is writing (and blocked: nobody reads): it
	// has taken its frame out of wbuf. Flushing alone is not enough, as the
	// flusher yields before it takes wbuf, and calls appended meanwhile
	// would go with its write.
	for {
		p.mu.Lock()
		writing := p.flushing && len(p.wbuf) == 0
		p.mu.Unlock()
		if writing {
			break
		}
		time.Sleep(time.Millisecond)
	}
	var busy error
	for i := 0; busy == nil; i++ {
		if i > maxPendingWrite/size+1 {
			t.Fatal("pending writes never refused")
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		r := p.call(ctx, kindExecute, "k", &big, nil, time.Minute)
		cancel()
		if errors.Is(r.err, errPeerBusy) {
			busy = r.err
		}
	}
	p.mu.Lock()
	pending := len(p.wbuf)
	p.mu.Unlock()
	if pending > maxPendingWrite+size+64 {
		t.Errorf("%d bytes pending, bound %d", pending, maxPendingWrite)
	}
	r := <-first
	if !errors.Is(r.err, errPeerGone) {
		t.Fatalf("blocked write: %v, want errPeerGone after the write deadline", r.err)
	}
	if _, ok := m.peers["stuck"]; ok {
		t.Error("failed peer still registered")
	}
}
