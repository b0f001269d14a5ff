package wire

import (
	"context"
	"net"
	"runtime"
	"runtime/metrics"
	"strings"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/bucketgrid/bucketgrid/cmd/bucketgrid/internal/budget"
)

// followedServer serves srv as the service does: on a listener the budget
// follows, with stream workers and a read timeout. It returns a client
// connection to it.
func followedServer(t *testing.T, srv rlspb.RateLimitServiceServer, readTimeout time.Duration) *grpc.ClientConn {
	t.Helper()
	b := budget.New(1 << 30)
	s := grpc.NewServer(grpc.ForceServerCodecV2(NewCodec()), grpc.NumStreamWorkers(8),
		b.GRPC(1<<20, budget.Methods{Main: []string{ShouldRateLimit}, Answer: []string{ShouldRateLimit}, Stream: 8 << 10}))
	Register(s, srv, readTimeout, 1<<20)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(b.Listener(ln))
	t.Cleanup(s.Stop)
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// goroutinesCreated is the count of goroutines the process has started.
func goroutinesCreated() uint64 {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// TestArrivedMessageReadInline: a check whose message has arrived in full
// when its handler runs (Envoy sends its HEADERS and DATA together) is
// read on the handler's goroutine, without a goroutine and a timer of its
// own to bound the wait: with the read timeout and the budget's cut in
// force, a check costs the process no goroutine of its own: neither one
// for its read nor one for the budget's release when the call ends
// (budget.Done).
func TestArrivedMessageReadInline(t *testing.T) {
	srv := &admitAll{}
	client := rlspb.NewRateLimitServiceClient(followedServer(t, srv, time.Minute))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req := &rlspb.RateLimitRequest{Domain: "d"}
	check := func() {
		resp, err := client.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.OverallCode != rlspb.RateLimitResponse_OK {
			t.Fatalf("check answered %v, want OK", resp.OverallCode)
		}
	}
	for range 20 { // the connection and the workers up
		check()
	}
	// A timing judgement: a check read the slow way now and then (its
	// handler ran before its DATA frame was handled) costs a goroutine
	// more; retry with more checks before judging.
	var perCheck float64
	for _, n := range []int{500, 2000, 5000} {
		before := goroutinesCreated()
		for range n {
			check()
		}
		perCheck = float64(goroutinesCreated()-before) / float64(n)
		t.Logf("%d checks: %.3f goroutines started per check", n, perCheck)
		if perCheck < 0.5 {
			return
		}
	}
	t.Fatalf("%.2f goroutines started per check, want under 0.5: none for the read, none for the budget's release", perCheck)
}

// TestLateMessageStillRead: a check whose message comes well after its
// headers is still read and decided, within the read timeout.
func TestLateMessageStillRead(t *testing.T) {
	srv := &admitAll{}
	cc := followedServer(t, srv, time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := cc.NewStream(ctx, &grpc.StreamDesc{StreamName: "ShouldRateLimit", ClientStreams: true}, ShouldRateLimit)
	if err != nil {
		t.Fatal(err)
	}
	// The handler runs with no message yet: it waits for it.
	for !handlerWaiting() {
		if ctx.Err() != nil {
			t.Fatal("the handler never waited for the message")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := st.SendMsg(&rlspb.RateLimitRequest{Domain: "d"}); err != nil {
		t.Fatal(err)
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	resp := new(rlspb.RateLimitResponse)
	if err := st.RecvMsg(resp); err != nil {
		t.Fatal(err)
	}
	if resp.OverallCode != rlspb.RateLimitResponse_OK || srv.calls.Load() != 1 {
		t.Fatalf("a late message answered %v after %d decisions, want OK after 1", resp.OverallCode, srv.calls.Load())
	}
}

// handlerWaiting reports whether a check's handler waits in recv.
func handlerWaiting() bool {
	buf := make([]byte, 1<<20)
	return strings.Contains(string(buf[:runtime.Stack(buf, true)]), "wire.handler.recv(")
}
