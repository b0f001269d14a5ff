package wire

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/bucketgrid/bucketgrid/cmd/bucketgrid/internal/budget"
)

// admitAll answers every check OK and counts the checks it saw.
type admitAll struct {
	rlspb.UnimplementedRateLimitServiceServer
	calls atomic.Int64
}

func (a *admitAll) ShouldRateLimit(context.Context, *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	a.calls.Add(1)
	return &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK}, nil
}

// TestFullBudgetIsOverLimit: a check that finds the memory budget full is
// answered OVER_LIMIT, not failed (an error is what Envoy's default
// failure_mode_deny: false lets through, so a client filling the budget
// would unlimit everyone), and its message is never handed to the
// service; once the room comes back, checks are decided again.
func TestFullBudgetIsOverLimit(t *testing.T) {
	const perCall = 1000
	b := budget.New(perCall) // room for one call in flight
	s := grpc.NewServer(grpc.ForceServerCodecV2(NewCodec()), b.GRPC(perCall, budget.Methods{Main: []string{ShouldRateLimit}, Answer: []string{ShouldRateLimit}}))
	srv := &admitAll{}
	Register(s, srv, 0, 1<<20)
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
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := rlspb.NewRateLimitServiceClient(cc)
	req := &rlspb.RateLimitRequest{Domain: "d"}

	// A call whose message never comes holds the whole budget.
	hctx, hold := context.WithCancel(ctx)
	if _, err := cc.NewStream(hctx, &grpc.StreamDesc{StreamName: "ShouldRateLimit"}, ShouldRateLimit); err != nil {
		t.Fatal(err)
	}
	for b.Used() != perCall { // the call's headers reach the server asynchronously
		if ctx.Err() != nil {
			t.Fatalf("the unfinished call holds %d bytes, want %d", b.Used(), perCall)
		}
		time.Sleep(5 * time.Millisecond)
	}
	resp, err := client.ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatalf("a check over the budget failed (%v): a proxy may let that through", err)
	}
	if resp.OverallCode != rlspb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("a check over the budget: %v, want OVER_LIMIT", resp.OverallCode)
	}
	if n := srv.calls.Load(); n != 0 {
		t.Fatalf("the service decided %d checks it had no room for", n)
	}
	if got := b.Refusals(); got != (budget.Refusals{Answered: 1}) {
		t.Fatalf("refusals %+v, want one check answered", got)
	}

	hold()
	for {
		resp, err := client.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.OverallCode == rlspb.RateLimitResponse_OK {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("checks were never decided again after the holding call ended")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if srv.calls.Load() == 0 {
		t.Fatal("an OK answer that the service never gave")
	}
}
