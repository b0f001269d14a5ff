package wire

import (
	"errors"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bucketgrid/bucketgrid/cmd/bucketgrid/internal/budget"
)

// Register registers srv as envoy.service.ratelimit.v3.RateLimitService on
// s, as rlspb.RegisterRateLimitServiceServer does, except that
// ShouldRateLimit reads its request itself and gives up on a request whose
// message has not arrived in full readTimeout after the call began
// (0: no bound): the call ends with DeadlineExceeded and a reset stream,
// and what the stream had buffered is freed. gRPC's own unary handler
// waits for the message as long as the connection lives, so a client that
// starts many calls and never finishes their messages would hold their
// buffers forever. A call that found the service's memory budget full
// (budget.Exhausted; see budget.Budget.GRPC with ShouldRateLimit) is
// answered OVER_LIMIT without its message being read, and so is a message
// of more than maxRecv bytes once read (decoding it needs Codec): the
// server's transport limit (grpc.MaxRecvMsgSize) must be above maxRecv, or
// grpc-go refuses the call RESOURCE_EXHAUSTED itself, an error Envoy's
// failure_mode_deny: false lets through. On the wire the call is the same
// unary call.
func Register(s *grpc.Server, srv rlspb.RateLimitServiceServer, readTimeout time.Duration, maxRecv int) {
	h := handler{srv: srv, readTimeout: readTimeout, maxRecv: maxRecv}
	s.RegisterService(&grpc.ServiceDesc{
		ServiceName: rlspb.RateLimitService_ServiceDesc.ServiceName,
		HandlerType: (*rlspb.RateLimitServiceServer)(nil),
		Streams:     []grpc.StreamDesc{{StreamName: "ShouldRateLimit", Handler: h.shouldRateLimit}},
		Metadata:    rlspb.RateLimitService_ServiceDesc.Metadata,
	}, srv)
}

type handler struct {
	srv         rlspb.RateLimitServiceServer
	readTimeout time.Duration
	maxRecv     int
}

// check is the message the handler reads: Codec decodes it into req only
// if it is at most max bytes, and records its size either way.
type check struct {
	req       *rlspb.RateLimitRequest
	max, size int
}

// overLimit is the answer to a check the service refuses unread.
func overLimit() *rlspb.RateLimitResponse {
	return &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OVER_LIMIT}
}

// ShouldRateLimit is the full name of the rate-limit check, as a call's
// headers name it.
const ShouldRateLimit = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

func (h handler) shouldRateLimit(_ any, stream grpc.ServerStream) error {
	if budget.Exhausted(stream.Context()) {
		// No room to read the message: refuse the request rather than fail
		// the call, which Envoy's default failure_mode_deny: false would
		// let through. The unread message goes with the stream's reset.
		return stream.SendMsg(overLimit())
	}
	in := new(rlspb.RateLimitRequest)
	m := &check{req: in, max: h.maxRecv}
	if err := h.recv(stream, m); errors.Is(err, errNoRoom) {
		return stream.SendMsg(overLimit())
	} else if err != nil {
		return err
	}
	if m.size > m.max || budget.Exhausted(stream.Context()) {
		// Decided, not failed, for the same reason: a client chooses the
		// descriptors' values, and so the message's size.
		return stream.SendMsg(overLimit())
	}
	// The message is decoded: the call holds the request now, not its
	// window and message buffer.
	budget.Settle(stream.Context(), requestBytes(in))
	resp, err := h.srv.ShouldRateLimit(stream.Context(), in)
	if err != nil {
		return err
	}
	err = stream.SendMsg(resp)
	// The message was read whole and answered: the call's bytes go back
	// now, not on a goroutine when gRPC ends the stream.
	budget.Done(stream.Context())
	return err
}

// errNoRoom is recv's error for a call whose message found no room in the
// budget (budget.Cut).
var errNoRoom = errors.New("no room in the budget for the request message")

// recv reads the call's one message into in, within h.readTimeout and
// while the budget has room for its bytes.
func (h handler) recv(stream grpc.ServerStream, in *check) error {
	cut := budget.Cut(stream.Context())
	if h.readTimeout <= 0 && cut == nil || budget.Arrived(stream.Context()) {
		// Nothing to bound, or nothing to wait for: the message has come
		// in full (Envoy sends it with the call's headers), so no
		// goroutine and no timer. Its bytes are charged already: a cut
		// they caused is answered once it is read (shouldRateLimit).
		return stream.RecvMsg(in)
	}
	// RecvMsg cannot be interrupted: after a timeout it returns once the
	// handler has returned and gRPC has reset the stream, and in is no
	// longer read.
	got := make(chan error, 1)
	go func() { got <- stream.RecvMsg(in) }()
	var timeout <-chan time.Time
	if h.readTimeout > 0 {
		t := time.NewTimer(h.readTimeout)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case err := <-got:
		return err
	case <-cut:
		return errNoRoom
	case <-timeout:
		return status.Error(codes.DeadlineExceeded, "request message not received within the read timeout")
	}
}

// requestBytes is about what a decoded request holds: its strings and a
// few words for every value around them.
func requestBytes(in *rlspb.RateLimitRequest) int64 {
	n := int64(64 + len(in.Domain))
	for _, d := range in.Descriptors {
		n += 64
		for _, e := range d.Entries {
			n += int64(48 + len(e.Key) + len(e.Value))
		}
	}
	return n
}
