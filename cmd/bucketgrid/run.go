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
// up to which no request starts a goroutine. An idle worker costs its
// stack (a few KiB).
const streamWorkers = 256

// backendCloseTimeout bounds closing the backend at shutdown: for the grid,
// handing this member's buckets over and leaving the cluster.
const backendCloseTimeout = 15 * time.Second

// expiryMargin is how long a bucket outlives the moment it is full again:
// from then on a missing bucket and a full one answer alike.
const expiryMargin = 10 * time.Second

// run starts the instance and serves until ctx ends, then shuts down
// gracefully. It writes one line to stdout when it is ready (debug= only
// with -debug-addr):
//
//	bucketgrid ready grpc=127.0.0.1:8081 http=127.0.0.1:8080 rlqs=127.0.0.1:8082 backend=grid member=127.0.0.1:3320 members=3 debug=127.0.0.1:6060
//
// rlqs= only with -rlqs.
// members= is the number of grid members this instance's gossip knew of
// when it was ready.
func run(ctx context.Context, c config, stdout, stderr io.Writer) (err error) {
	var handler slog.Handler = slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: c.LogLevel})
	if c.LogJSON {
		handler = slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: c.LogLevel})
	}
	log := slog.New(handler)
	m := metrics.New(c.MaxValued)
	src, err := openRules(c, log)
	if err != nil {
		return err
	}
	defer src.close()
	rules, err := src.first(ctx)
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	m.ConfigLoad(true)

	grpcLn, err := net.Listen("tcp", c.GRPCAddr)
	if err != nil {
		return fmt.Errorf("-grpc-addr: %w", err)
	}
	defer grpcLn.Close()
	var rlqsLn net.Listener
	if c.RLQS {
		if rlqsLn, err = net.Listen("tcp", c.RLQSAddr); err != nil {
			return fmt.Errorf("-rlqs-addr: %w", err)
		}
		defer rlqsLn.Close()
	}
	var httpLn net.Listener
	if c.HTTPAddr != "" {
		if httpLn, err = net.Listen("tcp", c.HTTPAddr); err != nil {
			return fmt.Errorf("-http-addr: %w", err)
		}
		defer httpLn.Close()
	}
	creds, err := serverCredentials(c.TLS)
	if err != nil {
		return err
	}

	be, err := openBackend(ctx, c, stderr)
	if err != nil {
		return fmt.Errorf("backend %s: %w", c.Backend, err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), backendCloseTimeout)
		defer cancel()
		if cerr := be.close(cctx); cerr != nil {
			err = errors.Join(err, fmt.Errorf("backend %s: close: %w", c.Backend, cerr))
		}
	}()

	// Every request's rule, and so its bucket's configuration, is at hand:
	// sending it along makes a new bucket one request, not two.
	mopts := []bucketgrid.ManagerOption{bucketgrid.WithExpiration(bucketgrid.ExpireAfterRefill(expiryMargin)),
		bucketgrid.WithEagerConfig()}
	if c.Degrade.On {
		d := degrade(c.Degrade)
		if c.Degrade.Count {
			counter, err := presence.New(be.store, presence.Config{TTL: c.Degrade.CountTTL, Floor: c.Degrade.Instances})
			if err != nil {
				return fmt.Errorf("-degrade-count: %w", err)
			}
			// the record is withdrawn before the backend closes (defers
			// run last first)
			cctx, stop := context.WithCancel(context.WithoutCancel(ctx))
			counted := make(chan struct{})
			go func() { defer close(counted); _ = counter.Run(cctx) }()
			defer func() { stop(); <-counted }()
			d.Instances = counter.LiveInstances
		}
		mopts = append(mopts, bucketgrid.WithDegrade(d))
	}
	mgr := bucketgrid.NewManager(be.exec, mopts...)
	defer mgr.Close() // its probes end before the backend closes
	m.Manager(mgr.Stats)
	svc := service.New(service.Options{
		Manager:                   mgr,
		Headers:                   c.Headers,
		RetryAfter:                c.RetryAfter,
		HeaderNames:               c.HeaderNames,
		GlobalShadowMode:          c.ShadowMode,
		StopCountingWhenOverLimit: c.StopCountingWhenOverLimit,
		GlobalQuotaMode:           c.QuotaMode,
		Timeout:                   c.Timeout,
		Metrics:                   m,
		Logger:                    log,
	})
	svc.SetConfig(rules)
	log.Info("configuration loaded", append([]any{"domains", rules.Domains()}, src.from...)...)

	// Stream workers keep goroutines whose stacks have grown, instead of a
	// new goroutine (and its stack growth, a tenth of a request's CPU) per
	// request. A request waits for its bucket's owner most of its time, so
	// the pool is sized for the requests in flight, not for the cores: gRPC
	// starts a goroutine for a request that finds every worker busy.
	inflight := budget.New(c.Limits.MaxInflightBytes)
	m.Budget("checks", inflight)
	// gRPC reads a check up to -grpc-max-read and the handler answers one
	// over -grpc-max-recv OVER_LIMIT: grpc-go refuses a message over its
	// limit itself, RESOURCE_EXHAUSTED, which Envoy lets through. A call
	// can hold a whole message of -grpc-max-read, so that is its reservation.
	opts := append(grpcLimits(c.Limits, c.Limits.GRPCMaxRead), grpc.NumStreamWorkers(streamWorkers), grpc.ForceServerCodecV2(wire.NewCodec()),
		inflight.GRPC(int64(c.Limits.GRPCWindow)+int64(c.Limits.GRPCMaxRead),
			budget.Methods{Main: []string{wire.ShouldRateLimit}, Answer: []string{wire.ShouldRateLimit}}))
	if creds != nil {
		opts = append(opts, grpc.Creds(creds))
	}
	gs := grpc.NewServer(opts...)
	wire.Register(gs, svc, c.Limits.GRPCReadTimeout, c.Limits.GRPCMaxRecv)
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(rlspb.RateLimitService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(gs, hs)
	// The quota service has a port of its own: a usage report holds every
	// bucket an Envoy has, far beyond a check's -grpc-max-recv, and gRPC's
	// message limit is one per server; a call holds its worst case for as
	// long as it is open, so the quota streams take their own budget, never
	// the checks' room.
	var rlqs *quota.Server // renews assignments while it runs, below
	var qs *grpc.Server
	if c.RLQS {
		qb := budget.New(c.Limits.RLQSMaxBytes)
		m.Budget("quota", qb)
		// health Watch and reflection streams hold at most half of it
		qopts := append(grpcLimits(c.Limits, c.Limits.RLQSMaxRecv),
			qb.GRPC(int64(c.Limits.GRPCWindow)+int64(c.Limits.RLQSMaxRecv), budget.Methods{Main: []string{rlqspb.RateLimitQuotaService_StreamRateLimitQuotas_FullMethodName}}))
		if creds != nil {
			qopts = append(qopts, grpc.Creds(creds))
		}
		qs = grpc.NewServer(qopts...)
		if rlqs, err = quota.Register(qs, quota.Options{Manager: mgr, Config: svc.Config, Logger: log}); err != nil {
			return err
		}
		healthpb.RegisterHealthServer(qs, hs)
		m.Quota(rlqs.Stats)
	}
	reflection.Register(gs)

	var healthy atomic.Bool
	healthy.Store(true)
	mux := http.NewServeMux()
	mux.Handle("POST /json", inflight.HTTP(http.MaxBytesHandler(svc.JSONHandler(), c.Limits.HTTPMaxBody), c.Limits.HTTPMaxBody))
	mux.HandleFunc("GET /healthcheck", func(w http.ResponseWriter, _ *http.Request) {
		if !healthy.Load() {
			http.Error(w, "shutting down", http.StatusInternalServerError)
			return
		}
		io.WriteString(w, "OK")
	})
	mux.Handle("GET /metrics", m.Handler())
	hsrv := httpServer(mux, c.Limits)

	var debugSrv *http.Server
	debugAddr := ""
	if c.DebugAddr != "" {
		dln, err := net.Listen("tcp", c.DebugAddr)
		if err != nil {
			return fmt.Errorf("-debug-addr: %w", err)
		}
		dm := http.NewServeMux()
		dm.HandleFunc("/debug/pprof/", pprof.Index)
		dm.HandleFunc("/debug/pprof/profile", pprof.Profile)
		dm.HandleFunc("/debug/pprof/trace", pprof.Trace)
		dm.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		debugSrv = &http.Server{Handler: dm, ReadHeaderTimeout: 10 * time.Second}
		debugAddr = " debug=" + dln.Addr().String()
		go debugSrv.Serve(dln)
		defer debugSrv.Close()
	}

	var wg sync.WaitGroup
	serveErr := make(chan error, 3)
	wg.Go(func() {
		if err := gs.Serve(netutil.LimitListener(grpcLn, c.Limits.GRPCMaxConns)); err != nil {
			serveErr <- fmt.Errorf("grpc: %w", err)
		}
	})
	if qs != nil {
		wg.Go(func() {
			if err := qs.Serve(netutil.LimitListener(rlqsLn, c.Limits.GRPCMaxConns)); err != nil {
				serveErr <- fmt.Errorf("rlqs: %w", err)
			}
		})
	}
	if httpLn != nil {
		wg.Go(func() {
			if err := hsrv.Serve(netutil.LimitListener(httpLn, c.Limits.HTTPMaxConns)); err != nil && !errors.Is(err, http.ErrServerClosed) {
				serveErr <- fmt.Errorf("http: %w", err)
			}
		})
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	if rlqs != nil {
		wg.Go(func() { rlqs.Run(watchCtx) }) // its streams end before GracefulStop waits for them
	}
	wg.Go(func() {
		src.watch(watchCtx, func(cfg *policy.Rules) {
			svc.SetConfig(cfg)
			m.ConfigLoad(true)
			log.Info("configuration reloaded", "domains", cfg.Domains())
		}, func(err error) {
			m.ConfigLoad(false)
			log.Error("configuration reload failed; keeping the previous configuration", "err", err)
		})
	})

	httpAddr := ""
	if httpLn != nil {
		httpAddr = httpLn.Addr().String()
	}
	rlqsAddr := ""
	if rlqsLn != nil {
		rlqsAddr = " rlqs=" + rlqsLn.Addr().String()
	}
	fmt.Fprintf(stdout, "bucketgrid ready grpc=%s http=%s%s backend=%s%s%s\n", grpcLn.Addr(), httpAddr, rlqsAddr, c.Backend, be.describe, debugAddr)

	select {
	case <-ctx.Done():
	case err = <-serveErr:
	}
	healthy.Store(false)
	hs.Shutdown() // every service NOT_SERVING
	stopWatch()
	if err == nil && c.DrainGrace > 0 {
		// Load balancers stop sending once they see the health checks
		// fail; until then requests keep coming and are answered.
		log.Info("shutting down: health checks fail, requests are still answered", "drain-grace", c.DrainGrace)
		time.Sleep(c.DrainGrace)
	}
	log.Info("shutting down: listeners close")
	grace, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.ShutdownGrace)
	defer cancel()
	for _, srv := range []*grpc.Server{gs, qs} {
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
	if httpLn != nil {
		if serr := hsrv.Shutdown(grace); serr != nil {
			hsrv.Close()
		}
	}
	wg.Wait()
	return err
}

// degrade returns the degraded mode the flags describe.
func degrade(f degradeFlags) bucketgrid.Degrade {
	d := bucketgrid.Degrade{Timeout: f.Timeout}
	if n := f.Instances; n > 0 {
		d.Instances = func() int { return n }
	}
	return d
}
