package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"sync/atomic"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/netutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/cas/presence"
	"github.com/bucketgrid/bucketgrid/cmd/bucketgrid/internal/budget"
	"github.com/bucketgrid/bucketgrid/cmd/bucketgrid/internal/metrics"
	"github.com/bucketgrid/bucketgrid/cmd/bucketgrid/internal/quota"
	"github.com/bucketgrid/bucketgrid/cmd/bucketgrid/internal/service"
	"github.com/bucketgrid/bucketgrid/cmd/bucketgrid/internal/wire"
	"github.com/bucketgrid/bucketgrid/policy"
)

// streamWorkers is the number of gRPC stream workers: requests in flight
// up to which no request starts a goroutine. The workers take streams in
// turn from one channel, and every garbage collection halves the stack of
// each parked one, which its next check grows back: with 256 workers
// runtime.copystack held 9–18 % of one instance's CPU on a hot descriptor,
// with 64 1–7 % (docs/benchmarks.md). A request beyond them starts a
// goroutine whose stack grows as a shrunk worker's does, so a burst past
// 64 in flight costs what every request did with 256.
const streamWorkers = 64

// backendCloseTimeout bounds closing the backend at shutdown: for the grid,
// waiting until every bucket has a copy on another member (up to 24 s: the
// member keeps its LeaveTimeout, 5 s, and 1 s for the leave, see
// olric.Member.Shutdown), then handing this member's buckets over and
// leaving the cluster. A member stopped right after another restarted
// waits here while the grid re-replicates what the restart moved.
const backendCloseTimeout = 30 * time.Second

// expiryMargin is how long a bucket outlives the moment it is full again:
// from then on a missing bucket and a full one answer alike.
const expiryMargin = 10 * time.Second

// run starts the instance and serves until ctx ends, then shuts down
// gracefully. It refuses settings that validate refuses before it starts
// anything. It writes one line to stdout when it is ready (debug= only
// with -debug-addr):
//
//	bucketgrid ready grpc=127.0.0.1:8081 http=127.0.0.1:8080 rlqs=127.0.0.1:8082 backend=grid member=127.0.0.1:3320 members=3 debug=127.0.0.1:6060
//
// rlqs= only with -rlqs.
// members= is the number of grid members this instance's gossip knew of
// when it was ready.
func run(ctx context.Context, s settings, stdout, stderr io.Writer) (err error) {
	if err := s.validate(); err != nil {
		return err
	}
	log := newLogger(s, stderr)
	m := metrics.New(s.MaxValued)
	src, err := openRules(s, log)
	if err != nil {
		return err
	}
	defer src.close()
	rules, err := src.first(ctx)
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	m.ConfigLoad(true)
	creds, err := serverCredentials(s.TLS)
	if err != nil {
		return err
	}
	openBackend, err := newBackend(s, stderr)
	if err != nil {
		return fmt.Errorf("backend %s: %w", s.Backend, err)
	}
	lns, err := listen(s)
	if err != nil {
		return err
	}
	defer lns.close()

	be, err := openBackend(ctx)
	if err != nil {
		return fmt.Errorf("backend %s: %w", s.Backend, err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), backendCloseTimeout)
		defer cancel()
		if cerr := be.close(cctx); cerr != nil {
			err = errors.Join(err, fmt.Errorf("backend %s: close: %w", s.Backend, cerr))
		}
	}()
	mgr, stopCounting, err := newManager(ctx, s, be)
	if err != nil {
		return err
	}
	defer stopCounting() // the presence record is withdrawn before the backend closes
	defer mgr.Close()    // its probes end before the backend closes
	m.Manager(mgr.Stats)
	svc := service.New(service.Options{
		Manager:                   mgr,
		Headers:                   s.Headers,
		RetryAfter:                s.RetryAfter,
		HeaderNames:               s.HeaderNames,
		GlobalShadowMode:          s.ShadowMode,
		StopCountingWhenOverLimit: s.StopCountingWhenOverLimit,
		GlobalQuotaMode:           s.QuotaMode,
		Timeout:                   s.Timeout,
		Metrics:                   m,
		Logger:                    log,
	})
	svc.SetConfig(rules)
	log.Info("configuration loaded", append([]any{"domains", rules.Domains()}, src.from...)...)

	srv, err := newServers(s, svc, mgr, m, creds, log)
	if err != nil {
		return err
	}
	debugAddr, closeDebug, err := serveDebug(s.DebugAddr)
	if err != nil {
		return err
	}
	defer closeDebug()

	var wg sync.WaitGroup
	serveErr := make(chan error, 3)
	srv.serve(&wg, s, lns, serveErr)
	watchCtx, stopWatch := context.WithCancel(ctx)
	srv.watch(watchCtx, &wg, src, svc, m, log)
	fmt.Fprintf(stdout, "bucketgrid ready grpc=%s http=%s%s backend=%s%s%s\n", lns.grpc.Addr(), addrOf(lns.http, ""), addrOf(lns.rlqs, " rlqs="), s.Backend, be.describe, debugAddr)

	select {
	case <-ctx.Done():
	case err = <-serveErr:
	}
	srv.fail()
	stopWatch()
	srv.shutdown(ctx, s, err == nil, log)
	wg.Wait()
	return err
}

// newLogger returns the logger -log-level and -log-format describe,
// writing to stderr.
func newLogger(s settings, stderr io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: s.LogLevel}
	if s.LogJSON {
		return slog.New(slog.NewJSONHandler(stderr, opts))
	}
	return slog.New(slog.NewTextHandler(stderr, opts))
}

// listeners are the service's listeners: gRPC always, the quota service's
// with -rlqs, HTTP unless -http-addr is empty.
type listeners struct{ grpc, rlqs, http net.Listener }

// listen opens the listeners s names.
func listen(s settings) (*listeners, error) {
	l := &listeners{}
	var err error
	if l.grpc, err = net.Listen("tcp", s.GRPCAddr); err != nil {
		return nil, fmt.Errorf("-grpc-addr: %w", err)
	}
	if s.RLQS {
		if l.rlqs, err = net.Listen("tcp", s.RLQSAddr); err != nil {
			l.close()
			return nil, fmt.Errorf("-rlqs-addr: %w", err)
		}
	}
	if s.HTTPAddr != "" {
		if l.http, err = net.Listen("tcp", s.HTTPAddr); err != nil {
			l.close()
			return nil, fmt.Errorf("-http-addr: %w", err)
		}
	}
	return l, nil
}

func (l *listeners) close() {
	for _, ln := range []net.Listener{l.grpc, l.rlqs, l.http} {
		if ln != nil {
			ln.Close()
		}
	}
}

// addrOf returns prefix and ln's address, or "" without ln.
func addrOf(ln net.Listener, prefix string) string {
	if ln == nil {
		return ""
	}
	return prefix + ln.Addr().String()
}

// newManager returns the Manager of the backend's buckets, in the degraded
// mode of -degrade; under -degrade-count it counts the instances until
// stop is called.
func newManager(ctx context.Context, s settings, be *backend) (mgr *bucketgrid.Manager, stop func(), err error) {
	// Every request's rule, and so its bucket's configuration, is at hand:
	// sending it along makes a new bucket one request, not two.
	mopts := []bucketgrid.ManagerOption{bucketgrid.WithExpiration(bucketgrid.ExpireAfterRefill(expiryMargin)),
		bucketgrid.WithEagerConfig()}
	stop = func() {}
	if s.Degrade.On {
		d := degrade(s.Degrade)
		if s.Degrade.Count {
			counter, err := presence.New(be.store, presence.Config{TTL: s.Degrade.CountTTL, Floor: s.Degrade.Instances})
			if err != nil {
				return nil, nil, fmt.Errorf("-degrade-count: %w", err)
			}
			cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
			counted := make(chan struct{})
			go func() { defer close(counted); _ = counter.Run(cctx) }()
			stop = func() { cancel(); <-counted }
			d.Instances = counter.LiveInstances
		}
		mopts = append(mopts, bucketgrid.WithDegrade(d))
	}
	return bucketgrid.NewManager(be.exec, mopts...), stop, nil
}

// frontServers are the service's servers, built but not yet serving.
type frontServers struct {
	grpc    *grpc.Server
	quota   *grpc.Server  // with -rlqs
	rlqs    *quota.Server // with -rlqs; renews assignments while it runs
	health  *health.Server
	http    *http.Server
	healthy *atomic.Bool // false once shutting down: /healthcheck fails

	inflight *budget.Budget // the checks' budget, which follows the gRPC port's connections
	tls      bool           // the gRPC port's credentials follow them, not its listener
}

// streamBytes is what a gRPC call on the check port takes from the budget
// at its headers, before the bytes of its message: what a stalled call
// costs the service, measured (TestStalledChecksCostTheirBytes logs it).
const streamBytes = 8 << 10

// newServers builds the gRPC, quota and HTTP servers of svc.
func newServers(s settings, svc *service.Service, mgr *bucketgrid.Manager, m *metrics.Metrics, creds credentials.TransportCredentials, log *slog.Logger) (*frontServers, error) {
	// Stream workers keep goroutines whose stacks have grown, instead of a
	// new goroutine (and its stack growth, a tenth of a request's CPU) per
	// request. A request waits for its bucket's owner most of its time, so
	// the pool is sized for the requests in flight, not for the cores: gRPC
	// starts a goroutine for a request that finds every worker busy.
	inflight := budget.New(s.Limits.MaxInflightBytes)
	m.Budget("checks", inflight)
	// gRPC reads a check up to -grpc-max-read and the handler answers one
	// over -grpc-max-recv OVER_LIMIT: grpc-go refuses a message over its
	// limit itself, RESOURCE_EXHAUSTED, which Envoy lets through. A call
	// can hold a whole message of -grpc-max-read, so that is its reservation.
	opts := append(grpcLimits(s.Limits, s.Limits.GRPCMaxRead), grpc.NumStreamWorkers(streamWorkers), grpc.ForceServerCodecV2(wire.NewCodec()),
		inflight.GRPC(int64(s.Limits.GRPCWindow)+int64(s.Limits.GRPCMaxRead),
			budget.Methods{Main: []string{wire.ShouldRateLimit}, Answer: []string{wire.ShouldRateLimit}, Stream: streamBytes}))
	if creds != nil {
		// the budget follows every connection's frames (the listener
		// does without TLS, see serve)
		opts = append(opts, grpc.Creds(inflight.Credentials(creds)))
	}
	sv := &frontServers{grpc: grpc.NewServer(opts...), health: health.NewServer(), healthy: new(atomic.Bool), inflight: inflight, tls: creds != nil}
	sv.healthy.Store(true)
	wire.Register(sv.grpc, svc, s.Limits.GRPCReadTimeout, s.Limits.GRPCMaxRecv)
	sv.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	sv.health.SetServingStatus(rlspb.RateLimitService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(sv.grpc, sv.health)
	if s.RLQS {
		if err := sv.newQuota(s, svc, mgr, m, creds, log); err != nil {
			return nil, err
		}
	}
	reflection.Register(sv.grpc)
	sv.http = sv.newHTTP(s, svc, m, inflight)
	return sv, nil
}

// newQuota builds the quota service's server. It has a port of its own: a
// usage report holds every bucket an Envoy has, far beyond a check's
// -grpc-max-recv, and gRPC's message limit is one per server; a call holds
// its worst case for as long as it is open, so the quota streams take their
// own budget, never the checks' room.
func (sv *frontServers) newQuota(s settings, svc *service.Service, mgr *bucketgrid.Manager, m *metrics.Metrics, creds credentials.TransportCredentials, log *slog.Logger) error {
	qb := budget.New(s.Limits.RLQSMaxBytes)
	m.Budget("quota", qb)
	// health Watch and reflection streams hold at most half of it
	qopts := append(grpcLimits(s.Limits, s.Limits.RLQSMaxRecv),
		qb.GRPC(int64(s.Limits.GRPCWindow)+int64(s.Limits.RLQSMaxRecv), budget.Methods{Main: []string{rlqspb.RateLimitQuotaService_StreamRateLimitQuotas_FullMethodName}}))
	if creds != nil {
		qopts = append(qopts, grpc.Creds(creds))
	}
	sv.quota = grpc.NewServer(qopts...)
	var err error
	if sv.rlqs, err = quota.Register(sv.quota, quota.Options{Manager: mgr, Config: svc.Config, Logger: log, FirstReport: s.Limits.RLQSFirstReport}); err != nil {
		return err
	}
	healthpb.RegisterHealthServer(sv.quota, sv.health)
	m.Quota(sv.rlqs.Stats)
	return nil
}

// newHTTP builds the HTTP server: /json, /healthcheck and /metrics.
func (sv *frontServers) newHTTP(s settings, svc *service.Service, m *metrics.Metrics, inflight *budget.Budget) *http.Server {
	mux := http.NewServeMux()
	mux.Handle("POST /json", inflight.HTTP(http.MaxBytesHandler(svc.JSONHandler(), s.Limits.HTTPMaxBody), s.Limits.HTTPMaxBody))
	mux.HandleFunc("GET /healthcheck", func(w http.ResponseWriter, _ *http.Request) {
		if !sv.healthy.Load() {
			http.Error(w, "shutting down", http.StatusInternalServerError)
			return
		}
		io.WriteString(w, "OK")
	})
	mux.Handle("GET /metrics", m.Handler())
	return httpServer(mux, s.Limits)
}

// serveDebug serves /debug/pprof on addr, unless addr is empty; it returns
// the ready line's debug= and the server's close.
func serveDebug(addr string) (describe string, closeFn func(), err error) {
	if addr == "" {
		return "", func() {}, nil
	}
	dln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("-debug-addr: %w", err)
	}
	dm := http.NewServeMux()
	dm.HandleFunc("/debug/pprof/", pprof.Index)
	dm.HandleFunc("/debug/pprof/profile", pprof.Profile)
	dm.HandleFunc("/debug/pprof/trace", pprof.Trace)
	dm.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	srv := &http.Server{Handler: dm, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(dln)
	return " debug=" + dln.Addr().String(), func() { srv.Close() }, nil
}

// serve starts serving on the listeners; a server that fails sends its
// error to serveErr.
func (sv *frontServers) serve(wg *sync.WaitGroup, s settings, lns *listeners, serveErr chan<- error) {
	wg.Go(func() {
		ln := netutil.LimitListener(lns.grpc, s.Limits.GRPCMaxConns)
		if !sv.tls {
			ln = sv.inflight.Listener(ln)
		}
		if err := sv.grpc.Serve(ln); err != nil {
			serveErr <- fmt.Errorf("grpc: %w", err)
		}
	})
	if sv.quota != nil {
		wg.Go(func() {
			if err := sv.quota.Serve(netutil.LimitListener(lns.rlqs, s.Limits.GRPCMaxConns)); err != nil {
				serveErr <- fmt.Errorf("rlqs: %w", err)
			}
		})
	}
	if lns.http != nil {
		wg.Go(func() {
			if err := sv.http.Serve(netutil.LimitListener(lns.http, s.Limits.HTTPMaxConns)); err != nil && !errors.Is(err, http.ErrServerClosed) {
				serveErr <- fmt.Errorf("http: %w", err)
			}
		})
	}
}

// watch renews the quota assignments and follows the rules until ctx ends.
func (sv *frontServers) watch(ctx context.Context, wg *sync.WaitGroup, src *rules, svc *service.Service, m *metrics.Metrics, log *slog.Logger) {
	if sv.rlqs != nil {
		wg.Go(func() { sv.rlqs.Run(ctx) }) // its streams end before GracefulStop waits for them
	}
	wg.Go(func() {
		src.watch(ctx, func(cfg *policy.Rules) {
			svc.SetConfig(cfg)
			m.ConfigLoad(true)
			log.Info("configuration reloaded", "domains", cfg.Domains())
		}, func(err error) {
			m.ConfigLoad(false)
			log.Error("configuration reload failed; keeping the previous configuration", "err", err)
		})
	})
}

// fail fails the health checks: /healthcheck and every gRPC service
// NOT_SERVING.
func (sv *frontServers) fail() {
	sv.healthy.Store(false)
	sv.health.Shutdown()
}

// shutdown waits -drain-grace (when drain), then stops the servers, giving
// requests in flight -shutdown-grace.
func (sv *frontServers) shutdown(ctx context.Context, s settings, drain bool, log *slog.Logger) {
	if drain && s.DrainGrace > 0 {
		// Load balancers stop sending once they see the health checks
		// fail; until then requests keep coming and are answered.
		log.Info("shutting down: health checks fail, requests are still answered", "drain-grace", s.DrainGrace)
		time.Sleep(s.DrainGrace)
	}
	log.Info("shutting down: listeners close")
	grace, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.ShutdownGrace)
	defer cancel()
	for _, srv := range []*grpc.Server{sv.grpc, sv.quota} {
		if srv == nil {
			continue
		}
		stopped := make(chan struct{})
		go func() { srv.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-grace.Done():
			srv.Stop()
			<-stopped
		}
	}
	if serr := sv.http.Shutdown(grace); serr != nil {
		sv.http.Close()
	}
}

// degrade returns the degraded mode the flags describe.
func degrade(f degradeFlags) bucketgrid.Degrade {
	d := bucketgrid.Degrade{Timeout: f.Timeout}
	if n := f.Instances; n > 0 {
		d.Instances = func() int { return n }
	}
	return d
}
