package budget

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// TestGRPCCallsShareOneBudget: calls on different connections draw on one
// budget; a call that finds it full is refused RESOURCE_EXHAUSTED at once,
// and the room comes back when the holding call ends.
func TestGRPCCallsShareOneBudget(t *testing.T) {
	const perCall = 1000
	b := New(2 * perCall)
	s := grpc.NewServer(b.GRPC(perCall, Methods{}))
	healthpb.RegisterHealthServer(s, health.NewServer())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	defer s.Stop()
	peers := 0
	dial := func() healthpb.HealthClient { // each from a peer address of its own
		peers++
		return healthpb.NewHealthClient(dialFrom(t, ln.Addr().String(), fmt.Sprintf("127.0.0.%d", peers)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Two long calls (Watch streams stay open), each on a connection of its own.
	var stops []context.CancelFunc
	for range 2 {
		wctx, stop := context.WithCancel(ctx)
		stops = append(stops, stop)
		w, err := dial().Watch(wctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Recv(); err != nil {
			t.Fatalf("a call within the budget: %v", err)
		}
	}
	if got := b.Used(); got != 2*perCall {
		t.Fatalf("two open calls hold %d bytes, want %d", got, 2*perCall)
	}
	third := dial()
	_, err = third.Check(ctx, &healthpb.HealthCheckRequest{})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a call over the budget: %v, want RESOURCE_EXHAUSTED", err)
	}
	if got := b.Refusals(); got != (Refusals{Exhausted: 1}) {
		t.Fatalf("refusals %+v, want one RESOURCE_EXHAUSTED", got)
	}
	stops[0]()
	// The ended call's room comes back (poll: its end reaches the server
	// asynchronously).
	for {
		if _, err := third.Check(ctx, &healthpb.HealthCheckRequest{}); err == nil {
			break
		} else if status.Code(err) != codes.ResourceExhausted {
			t.Fatal(err)
		}
		if ctx.Err() != nil {
			t.Fatal("the budget never came back after a call ended")
		}
		time.Sleep(10 * time.Millisecond)
	}
	stops[1]()
	for b.Used() != 0 {
		if ctx.Err() != nil {
			t.Fatalf("%d bytes still held after every call ended", b.Used())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestOtherStreamsLeaveTheAnsweredRoom: calls of methods GRPC was not told
// to answer hold at most half the budget together, so streams that stay
// open (health Watch) cannot leave the answered method (here Check, as a
// rate-limit check would be) without room.
func TestOtherStreamsLeaveTheAnsweredRoom(t *testing.T) {
	const perCall = 1000
	const check = "/grpc.health.v1.Health/Check"
	b := New(4 * perCall)
	s := grpc.NewServer(b.GRPC(perCall, Methods{Main: []string{check}, Answer: []string{check}}))
	healthpb.RegisterHealthServer(s, health.NewServer())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	defer s.Stop()
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	hc := healthpb.NewHealthClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Open Watch streams until one is refused; each stays open.
	opened := 0
	for {
		w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
		if err == nil {
			_, err = w.Recv()
		}
		if status.Code(err) == codes.ResourceExhausted {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if opened++; opened > 4 {
			t.Fatal("more open streams than the whole budget holds")
		}
	}
	if opened != 2 {
		t.Fatalf("%d Watch streams held room, want 2 (half the budget)", opened)
	}
	for i := range 2 { // from other addresses: the Watch streams' peer holds its share
		other := healthpb.NewHealthClient(dialFrom(t, ln.Addr().String(), fmt.Sprintf("127.0.0.%d", 2+i)))
		if _, err := other.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("the answered method beside the open streams: %v", err)
		}
	}
	if got := b.Refusals(); got != (Refusals{Exhausted: 1}) {
		t.Fatalf("refusals %+v, want one RESOURCE_EXHAUSTED (the third Watch) and no answered call refused", got)
	}
}

func TestSettleOnlyLowers(t *testing.T) {
	b := New(100)
	ctx, cancel := context.WithCancel(context.Background())
	ctx, ok, _ := b.reserve(ctx, nil, 60, nil)
	if !ok {
		t.Fatal("60 of 100 refused")
	}
	Settle(ctx, 80)
	if b.Used() != 60 {
		t.Fatalf("settling higher: %d held", b.Used())
	}
	Settle(ctx, 10)
	if b.Used() != 10 {
		t.Fatalf("settled at 10: %d held", b.Used())
	}
	cancel()
	deadline := time.Now().Add(time.Minute)
	for b.Used() != 0 { // AfterFunc runs on its own goroutine
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes still held a minute after the request ended", b.Used())
		}
		time.Sleep(time.Millisecond)
	}
	Settle(ctx, 5) // after release: nothing
	if b.Used() != 0 {
		t.Fatalf("settling after the end took %d", b.Used())
	}
	Settle(context.Background(), 5)
}

// TestHTTPBodiesShareOneBudget: a request whose body does not fit while
// another holds the budget is answered 503 without its body being read.
func TestHTTPBodiesShareOneBudget(t *testing.T) {
	b := New(1000)
	hold, held := make(chan struct{}), make(chan struct{})
	read := make(chan int, 2)
	h := b.HTTP(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := r.Body.Read(make([]byte, 10))
		read <- n
		if r.URL.Path == "/hold" {
			close(held)
			<-hold
		}
	}), 1000)
	srv := httptest.NewServer(h)
	defer srv.Close()
	defer func() {
		select {
		case <-hold:
		default:
			close(hold) // a failed test must not leave srv.Close waiting
		}
	}()
	// the other requests from another address: the holding one's has its share
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
	other := &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
	done := make(chan error, 1)
	go func() {
		resp, err := http.Post(srv.URL+"/hold", "text/plain", strings.NewReader(strings.Repeat("a", 800)))
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	<-held
	<-read
	resp, err := other.Post(srv.URL+"/other", "text/plain", strings.NewReader(strings.Repeat("b", 300)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a body over the budget: %d, want 503 with Retry-After", resp.StatusCode)
	}
	select {
	case <-read:
		t.Fatal("the refused request's handler ran")
	default:
	}
	// A body that fits in what is left goes through.
	resp, err = other.Post(srv.URL+"/other", "text/plain", strings.NewReader(strings.Repeat("c", 150)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a body within the budget: %d", resp.StatusCode)
	}
	close(hold)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if b.Used() != 0 {
		t.Fatalf("%d bytes held after every request ended", b.Used())
	}
	if got := b.Refusals(); got != (Refusals{HTTP: 1}) {
		t.Fatalf("refusals %+v, want one 503", got)
	}
}

// dialFrom returns a connection to addr from the loopback address local
// (any of 127.0.0.0/8), so that a test can speak as several peers.
func dialFrom(t *testing.T, addr, local string) *grpc.ClientConn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) { return d.DialContext(ctx, "tcp", a) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// TestOnePeerLeavesRoomForOthers: calls from one peer address, however
// many connections it opens, hold at most half the budget when it is
// alone, and calls from other addresses still find room; a
// connection holds at most 1/connShare once half is taken. Each refusal
// by a share is counted.
func TestOnePeerLeavesRoomForOthers(t *testing.T) {
	const perCall = 1000
	b := New(64 * perCall)
	s := grpc.NewServer(b.GRPC(perCall, Methods{}))
	healthpb.RegisterHealthServer(s, health.NewServer())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	defer s.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// watch opens Watch streams on hc until one is refused; they stay open.
	watch := func(hc healthpb.HealthClient, most int) int {
		for opened := 0; ; opened++ {
			w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
			if err == nil {
				_, err = w.Recv()
			}
			if status.Code(err) == codes.ResourceExhausted {
				return opened
			}
			if err != nil {
				t.Fatal(err)
			}
			if opened > most {
				t.Fatalf("more than %d streams held room", most)
			}
		}
	}
	// the attacker: one address, four connections
	held := 0
	for range 4 {
		held += watch(healthpb.NewHealthClient(dialFrom(t, ln.Addr().String(), "127.0.0.1")), 64)
	}
	if held != 32 {
		t.Fatalf("one address held %d calls, want 32 (half the budget: beyond it, only an address holding less than its share takes more)", held)
	}
	// one connection of another address: its share of a connection
	if got, want := watch(healthpb.NewHealthClient(dialFrom(t, ln.Addr().String(), "127.0.0.2")), 64), 64/connShare; got != want {
		t.Fatalf("another address's connection held %d calls, want %d (its connection share)", got, want)
	}
	// and a third address still gets in
	if _, err := healthpb.NewHealthClient(dialFrom(t, ln.Addr().String(), "127.0.0.3")).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("a call from a third address beside them: %v", err)
	}
	if got := b.Refusals(); got.Shared != 5 || got.Exhausted != 5 {
		t.Fatalf("refusals %+v, want 5, all by a share", got)
	}
}

// TestDoneGivesBackOnce: Done gives a request's bytes back at once, and
// the release its context's end would have run (had it begun before Done
// stopped it) gives nothing a second time: the budget holds exactly what
// the calls still running hold.
func TestDoneGivesBackOnce(t *testing.T) {
	b := New(1 << 20)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	held, ok, _ := b.reserve(ctx, nil, 4096, nil)
	if !ok {
		t.Fatal("4 KiB refused by an empty budget of 1 MiB")
	}
	other, cancelOther := context.WithCancel(context.Background())
	defer cancelOther()
	if _, ok, _ := b.reserve(other, nil, 1000, nil); !ok {
		t.Fatal("1000 bytes refused")
	}
	Done(held)
	if got := b.used.Load(); got != 1000 {
		t.Fatalf("after Done: %d bytes held, want the other call's 1000", got)
	}
	held.Value(grantKey{}).(*grant).release() // the context's release, late
	if got := b.used.Load(); got != 1000 {
		t.Fatalf("after a second release: %d bytes held, want 1000", got)
	}
	Done(context.Background()) // no reservation: nothing happens
}
