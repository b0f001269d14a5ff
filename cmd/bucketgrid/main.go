// Command bucketgrid is a global rate-limit service for Envoy fleets: a
// drop-in for envoyproxy/ratelimit that reads the same configuration files,
// answers the same gRPC API (envoy.service.ratelimit.v3) and JSON endpoint,
// and keeps its buckets in a grid its own instances form, with no Redis to
// run. Every rule is envoyproxy/ratelimit's fixed window by default, answered
// request for request as that service answers; a rule (or the service) may
// use a token bucket instead.
//
//	bucketgrid -config ratelimit/config
//
// starts one instance; more instances join it with -grid-peers. See
// README.md for a quick start, the flags and a migration note.
//
// It serves:
//
//	gRPC  -grpc-addr   envoy.service.ratelimit.v3.RateLimitService,
//	                   grpc.health.v1.Health, server reflection
//	HTTP  -http-addr   POST /json, GET /healthcheck, GET /metrics
//
// SIGTERM or SIGINT shuts it down gracefully: health checks fail first, for
// -drain-grace, while requests are still answered; then the listeners close,
// requests in flight are answered, and the instance leaves the grid.
// -version prints the version.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/bucketgrid/bucketgrid/cmd/bucketgrid/internal/heapfloor"
)

func main() {
	cfg, err := parseFlags(flag.CommandLine, os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "bucketgrid:", err)
		os.Exit(2)
	}
	if cfg.Version {
		fmt.Println(version())
		return
	}
	// the process's GOGC is main's to set, not run's, which tests call in
	// process
	defer heapfloor.Start(uint64(cfg.HeapFloor))()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "bucketgrid:", err)
		os.Exit(1)
	}
}
