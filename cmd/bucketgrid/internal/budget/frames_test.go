package budget

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// TestFollowedBytesReturnToZero: on a followed listener, calls that
// complete, calls that stall with a message prefix (padded or not) and are
// reset or whose connection closes, and calls cut for want of room leave
// the budget and every share at exactly 0.
func TestFollowedBytesReturnToZero(t *testing.T) {
	const stream = 1000
	b := New(200 * stream)
	s := grpc.NewServer(b.GRPC(100*stream, Methods{Stream: stream}))
	healthpb.RegisterHealthServer(s, health.NewServer())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(b.Listener(ln))
	defer s.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() { // complete calls
			hc := healthpb.NewHealthClient(dialFrom(t, ln.Addr().String(), "127.0.0.1"))
			for range 50 {
				hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "x"})
			}
		})
		wg.Go(func() { // stalled calls, half reset, then the connection closed
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Error(err)
				return
			}
			fr := http2.NewFramer(c, c)
			c.Write([]byte(http2.ClientPreface))
			fr.WriteSettings()
			var hb []byte
			enc := hpack.NewEncoder(appender{&hb})
			for j := range 40 {
				hb = hb[:0]
				for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/grpc.health.v1.Health/Check"},
					{":authority", "x"}, {"content-type", "application/grpc"}} {
					enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
				}
				id := uint32(2*j + 1)
				fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb, EndHeaders: true})
				prefix := []byte{0, 0, 0, 1, 0, 1, 2, 3}
				if (i+j)%2 == 0 {
					fr.WriteDataPadded(id, false, prefix, make([]byte, 17))
				} else {
					fr.WriteData(id, false, append(prefix, make([]byte, 3000*(j%3))...))
				}
				if j%2 == 0 {
					fr.WriteRSTStream(id, http2.ErrCodeCancel)
				}
			}
			// see the server take the calls in: a ping answered
			fr.WritePing(false, [8]byte{1})
			for {
				f, err := fr.ReadFrame()
				if err != nil {
					t.Error(err)
					break
				}
				if p, ok := f.(*http2.PingFrame); ok && p.IsAck() {
					break
				}
			}
			c.Close()
		})
	}
	wg.Wait()
	for b.Used() != 0 {
		if ctx.Err() != nil {
			t.Fatalf("%d bytes still held after every call and connection ended", b.Used())
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.mu.Lock()
	peers, conns := len(b.peers), len(b.conns)
	b.mu.Unlock()
	if peers != 0 || conns != 0 {
		t.Fatalf("shares left: %d peers, %d connections", peers, conns)
	}
	if r := b.Refusals(); r.Exhausted == 0 {
		t.Logf("no call was cut or refused: %+v", r)
	}
}

type appender struct{ b *[]byte }

func (a appender) Write(p []byte) (int, error) {
	*a.b = append(*a.b, p...)
	return len(p), nil
}
