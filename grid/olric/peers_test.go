package olric

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/core/wire"
	"github.com/bucketgrid/bucketgrid/grid/olric/internal/frame"
)

// TestPeerWriteBounds runs a caller against an owner that reads nothing:
// its pending frames stop at maxPendingWrite (errPeerBusy, retried by the
// caller) and the write blocked on the owner ends at ChannelIOTimeout,
// failing the connection (errPeerGone, re-routed and retried).
func TestPeerWriteBounds(t *testing.T) {
	m := &Member{}
	m.cfg.ChannelIOTimeout = 2 * time.Second
	caller, owner := net.Pipe()
	defer owner.Close()
	p := &peer{m: m, name: "stuck", c: caller, pending: map[uint64]chan reply{}}
	big := largestRequest(t)
	size := len(wire.AppendRequest(nil, &big))
	first := make(chan reply, 1)
	go func() { first <- p.call(context.Background(), frame.KindExecute, "k", &big, nil, time.Minute) }()
	// Wait until the first call is writing (and blocked: nobody reads): it
	// has taken its frame out of wbuf. Flushing alone is not enough, as the
	// flusher yields before it takes wbuf, and calls appended meanwhile
	// would go with its write.
	waitWriting(p)
	var busy error
	for i := 0; busy == nil; i++ {
		if i > maxPendingWrite/size+1 {
			t.Fatal("pending writes never refused")
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		r := p.call(ctx, frame.KindExecute, "k", &big, nil, time.Minute)
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
	if _, ok := m.peers.byName["stuck"]; ok {
		t.Error("failed peer still registered")
	}
}

// TestQueuedRequestsKeepTheirDeadline holds a caller's writes back (the
// connection to the owner is relayed only when the test says so) while
// requests queue behind a write in progress: one whose caller's context
// ends while it is queued, and one whose budget runs out while it is
// queued. Each fails with context.DeadlineExceeded, and neither is executed
// afterwards: the owner never sees a request whose caller stopped waiting.
func TestQueuedRequestsKeepTheirDeadline(t *testing.T) {
	owner := startCluster(t, 1, nil)[0]
	m := &Member{base: time.Now()}
	m.cfg.ChannelIOTimeout = time.Minute
	caller, relayed := net.Pipe()
	t.Cleanup(func() { caller.Close(); relayed.Close() })
	release := make(chan struct{})
	go func() {
		<-release
		c, err := net.Dial("tcp", owner.ChannelAddr())
		if err != nil {
			relayed.Close()
			return
		}
		defer c.Close()
		go io.Copy(relayed, c)
		io.Copy(c, relayed)
	}()
	p := &peer{m: m, name: owner.Name(), c: caller, pending: map[uint64]chan reply{}, wbuf: append([]byte(nil), frame.Preamble[:]...)}
	m.wg.Add(1)
	go p.read()
	t.Cleanup(func() { p.fail(errors.New("test over")) })

	cfg := testBucket(5)
	consume := consumeReq(&cfg, 1)
	first := make(chan reply, 1)
	go func() { first <- p.call(context.Background(), frame.KindExecute, "first", &consume, nil, time.Minute) }()
	// Wait until the first call is writing, blocked until the relay starts.
	waitWriting(p)
	// The caller's context ends while its request is queued.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	left := p.call(ctx, frame.KindExecute, "left", &consume, nil, 50*time.Millisecond)
	cancel()
	if !errors.Is(left.err, context.DeadlineExceeded) {
		t.Fatalf("caller whose context ended: %v, want context.DeadlineExceeded", left.err)
	}
	// The budget runs out while the request is queued; the caller waits on.
	expired := make(chan reply, 1)
	go func() {
		expired <- p.call(context.Background(), frame.KindExecute, "expired", &consume, nil, 50*time.Millisecond)
	}()
	for { // queued
		p.mu.Lock()
		n := len(p.pending)
		p.mu.Unlock()
		if n == 2 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // the budget must pass while it is queued, on purpose
	close(release)
	if r := <-first; r.err != nil || r.kind != frame.KindOK {
		t.Fatalf("first call: kind %d, %v", r.kind, r.err)
	}
	select {
	case r := <-expired:
		if !errors.Is(r.err, context.DeadlineExceeded) {
			t.Errorf("request whose budget passed while queued: kind %d, %v, want context.DeadlineExceeded", r.kind, r.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("request whose budget passed while queued: no answer in 30 s")
	}
	// Frames go out and are executed in order: a request after them sees
	// whatever they did.
	avail := availableReq(&cfg)
	for _, key := range []string{"left", "expired"} {
		r := p.call(context.Background(), frame.KindExecute, key, &avail, nil, time.Minute)
		if r.err != nil || r.kind != frame.KindOK {
			t.Fatalf("%s: kind %d, %v", key, r.kind, r.err)
		}
		if got := r.resp.Results[0].Tokens; got != 5 {
			t.Errorf("%s: %d tokens left, want 5: executed after its caller stopped waiting", key, got)
		}
	}
}

// TestOwnerStoreFailureRetried: an owner whose store call failed answers
// so that a remote caller retries it, as the owner retries its own
// (outcome.retry: Olric closed its connection to a holder that left, or
// dialled a dead one); any other error is not retried. Before, the caller
// failed at once with "owner …: client is closed" (TestCrash beside busy
// loops).
func TestOwnerStoreFailureRetried(t *testing.T) {
	for _, tc := range []struct {
		o     outcome
		retry bool
	}{
		{outcome{kind: frame.KindError, err: errors.New("redis: client is closed"), retry: true}, true},
		{outcome{kind: frame.KindError, err: errors.New("bucketgrid/olric: bad request")}, false},
	} {
		_, kind, payload, err := frame.Parse(tc.o.appendFrame(nil, 7)[4:])
		if err != nil {
			t.Fatal(err)
		}
		r := decodeReply(kind, payload)
		if r.kind != frame.KindError || r.retry != tc.retry || !strings.Contains(r.msg, tc.o.err.Error()) {
			t.Errorf("%v (retry %v) reached the caller as kind %d, %q, retry %v", tc.o.err, tc.o.retry, r.kind, r.msg, r.retry)
		}
	}
}

// waitWriting waits until p's flusher is writing a frame it took out of
// wbuf (and is blocked there when nobody reads): calls appended from then
// on wait in wbuf for the next write.
func waitWriting(p *peer) {
	for {
		p.mu.Lock()
		writing := p.flushing && len(p.wbuf) == 0
		p.mu.Unlock()
		if writing {
			return
		}
		time.Sleep(time.Millisecond)
	}
}
