package budget

import (
	"context"
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
	s := grpc.NewServer(b.GRPC(perCall))
	healthpb.RegisterHealthServer(s, health.NewServer())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	defer s.Stop()
	dial := func() healthpb.HealthClient {
		cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return healthpb.NewHealthClient(cc)
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
	s := grpc.NewServer(b.GRPC(perCall, check))
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
	for range 2 {
		if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
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
	ctx, ok := b.reserve(ctx, 60, nil)
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
	for b.Used() != 0 {
		time.Sleep(time.Millisecond) // AfterFunc runs on its own goroutine
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
	resp, err := http.Post(srv.URL+"/other", "text/plain", strings.NewReader(strings.Repeat("b", 300)))
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
	resp, err = http.Post(srv.URL+"/other", "text/plain", strings.NewReader(strings.Repeat("c", 150)))
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
