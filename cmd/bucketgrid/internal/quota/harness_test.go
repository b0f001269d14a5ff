package quota

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/cas/memstore"
	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/policy"
	"github.com/bucketgrid/bucketgrid/policy/rulefile"
)

// fleet is a quota server on a loopback gRPC server, a memory grid and
// simulated Envoys, all on one fake clock. Envoys, reports and periods
// are stepped by the test; settle waits until every message sent has been
// handled, so the fake network has no delay.
type fleet struct {
	t      testing.TB
	clk    *clock.Fake
	srv    *Server
	conn   *grpc.ClientConn
	envoys []*envoy
	raws   []*rawStream
	cfg    *policy.Rules
	start  int64
	ticks  int64 // periods run
	mgr    *bucketgrid.Manager
	store  *memstore.Store // the grid's
}

func newFleet(t testing.TB, rules string, opts Options) *fleet {
	t.Helper()
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	cfg, err := rulefile.Load([]rulefile.File{{Name: "rules.yaml", Data: []byte(rules)}}, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f := &fleet{t: t, clk: clk, cfg: cfg, start: clk.Now()}
	f.store = memstore.New(memstore.WithClock(clk))
	f.mgr = bucketgrid.NewManager(cas.New(f.store, cas.WithClock(clk)),
		bucketgrid.WithEagerConfig())
	opts.Manager, opts.Clock = f.mgr, clk
	// simulated Envoys may go quiet for as long as a test likes, unless
	// the test is about closing quiet streams
	if opts.FirstReport == 0 {
		opts.FirstReport = 24 * time.Hour
	}
	if opts.StreamIdle == 0 {
		opts.StreamIdle = 24 * time.Hour
	}
	opts.Config = func() *policy.Rules { return f.cfg }
	if f.srv, err = New(opts); err != nil {
		t.Fatal(err)
	}
	// an in-memory listener: the real gRPC server and HTTP/2 transport,
	// without the kernel's wakeups between the fake clock's steps (the
	// command's own test runs the service over TCP)
	ln := bufconn.Listen(1 << 20)
	gs := grpc.NewServer()
	rlqspb.RegisterRateLimitQuotaServiceServer(gs, f.srv)
	go gs.Serve(ln)
	if f.conn, err = grpc.NewClient("passthrough:///bufconn", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return ln.DialContext(ctx) })); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, e := range f.envoys {
			e.close()
		}
		f.srv.shutdown()
		f.conn.Close()
		gs.Stop()
	})
	return f
}

// envoy adds a simulated Envoy of domain.
func (f *fleet) envoy(domain string) *envoy {
	e := newEnvoy(f.clk, f.conn, domain)
	f.envoys = append(f.envoys, e)
	return e
}

// step advances the clock by d and runs the report timers and the
// server's period that fell due, then settles.
func (f *fleet) step(d time.Duration) {
	f.t.Helper()
	f.clk.Advance(d)
	for _, e := range f.envoys {
		e.report()
	}
	f.settle()
	if p := f.srv.period; f.clk.Now()-f.start >= (f.ticks+1)*p {
		f.ticks++
		f.srv.tick(context.Background())
	}
	f.srv.drain(context.Background())
	f.settle()
}

// settle waits until the server handled every report sent and every Envoy
// applied every response sent.
func (f *fleet) settle() {
	f.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; ; i++ {
		var sent, received int64
		for _, e := range f.envoys {
			sent += e.reportsSent.Load()
			received += e.received.Load()
			if n := e.unenforced.Load(); n > 0 {
				// Envoy ignores it, leaving the previous assignment to run
				// unrenewed: the server must never send one
				f.t.Fatalf("an Envoy received %d requests_per_time_unit assignments", n)
			}
		}
		for _, r := range f.raws {
			sent += r.sent.Load()
			received += r.received.Load()
		}
		c := &f.srv.counts // Stats would take the server's lock
		reports, queued, sent2, dropped := c.reports.Load(), c.queued.Load(), c.sent.Load(), c.dropped.Load()
		if dropped > 0 {
			f.t.Fatalf("server dropped %d responses", dropped)
		}
		if reports == sent && sent2 == queued && received == sent2 {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("not settled: %d reports sent, %d handled; responses %d queued, %d sent, %d received",
				sent, reports, queued, sent2, received)
		}
		// the server and the Envoys run in this process: yield to them
		// first, sleep only if they take long
		if i < 1000 {
			runtime.Gosched()
		} else {
			time.Sleep(time.Millisecond)
		}
	}
}

// elapsed is the fake time since the fleet started.
func (f *fleet) elapsed() time.Duration { return time.Duration(f.clk.Now() - f.start) }

func (f *fleet) String() string { return fmt.Sprintf("fleet at %v", f.elapsed()) }

// rawStream is a client of the server that is not Envoy: it sends what
// the test builds and keeps every response.
type rawStream struct {
	t              testing.TB
	st             grpc.BidiStreamingClient[rlqspb.RateLimitQuotaUsageReports, rlqspb.RateLimitQuotaResponse]
	sent, received atomic.Int64
	mu             sync.Mutex
	got            []*rlqspb.RateLimitQuotaResponse
	ended          chan error // the stream's end, once
}

// raw opens a rawStream on the fleet's server.
func (f *fleet) raw() *rawStream {
	f.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	f.t.Cleanup(cancel)
	st, err := rlqspb.NewRateLimitQuotaServiceClient(f.conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	r := &rawStream{t: f.t, st: st, ended: make(chan error, 1)}
	f.raws = append(f.raws, r)
	go func() {
		for {
			resp, err := st.Recv()
			if err != nil {
				r.ended <- err
				return
			}
			r.mu.Lock()
			r.got = append(r.got, resp)
			r.mu.Unlock()
			r.received.Add(1)
		}
	}()
	return r
}

// send sends one report.
func (r *rawStream) send(rep *rlqspb.RateLimitQuotaUsageReports) {
	r.t.Helper()
	if err := r.st.Send(rep); err != nil {
		r.t.Fatal(err)
	}
	r.sent.Add(1)
}

// actions returns every bucket action received so far, and forgets them.
func (r *rawStream) actions() []*rlqspb.RateLimitQuotaResponse_BucketAction {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*rlqspb.RateLimitQuotaResponse_BucketAction
	for _, resp := range r.got {
		out = append(out, resp.GetBucketAction()...)
	}
	r.got = nil
	return out
}
