// Command cluster is bucketgrid's demo: three members of one application
// cluster in this process, each embedding an Olric grid member and serving
// an API limited per client by httplimit, plus a page to watch and poke
// them:
//
//	go run ./examples/cluster
//
// Open any member's URL. Each client (the X-API-Key header, else the client
// address) has one bucket in the grid, stored on one member (its owner) and
// shared by all: fire requests at any member and the cluster admits exactly
// the limit. Change the limit on the page and it is stored in the grid as a
// new version; every member picks it up within half a second and passes the
// version with its bucket requests, so each bucket's configuration is
// replaced on its next request, tokens carried over proportionally.
//
// Every member serves:
//
//	GET  /                        the page
//	GET  /v1/quotes/random        the API, limited per client (IETF RateLimit
//	                              and X-RateLimit-* headers; 429 with Retry-After)
//	GET  /demo/state?apikey=KEY   the member's counters and KEY's bucket, read
//	                              from its owner (no apikey: the caller's address)
//	POST /demo/limit              {"capacity":20,"refillPerMinute":2} stores the
//	                              next version of the limit in the grid: an
//	                              unauthenticated admin endpoint, for loopback
//	                              only (JSON only, the members' own Host and
//	                              Origin: no cross-origin writes)
//	GET  /demo/members            the members and their URLs
//
// Flags set the ports and the initial limit; Ctrl-C (SIGINT) or SIGTERM
// shuts the members down gracefully.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	var (
		olricPorts = flag.String("olric", "3520,3530,3540", "Olric `ports` of the members, comma-separated; each member also uses the next two ports")
		httpAddrs  = flag.String("http", "127.0.0.1:8281,127.0.0.1:8282,127.0.0.1:8283", "HTTP `addresses` of the members, comma-separated")
		capacity   = flag.Int64("capacity", 10, "initial bucket capacity")
		refill     = flag.Int64("refill", 10, "initial refill, tokens per minute")
		verbose    = flag.Bool("v", false, "log Olric's messages and the demo's errors to stderr")
		failClosed = flag.Bool("fail-closed", false, "refuse requests (503) when a limit check fails, instead of serving them unlimited")
	)
	flag.Parse()
	ports, err := parsePorts(*olricPorts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cluster: -olric:", err)
		os.Exit(2)
	}
	cfg := Config{
		OlricPorts: ports,
		HTTPAddrs:  strings.Split(*httpAddrs, ","),
		Limit:      Limit{Capacity: *capacity, RefillPerMinute: *refill},
		FailClosed: *failClosed,
	}
	if *verbose {
		cfg.LogOutput = os.Stderr
	}
	if err := run(cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
}

func run(cfg Config, out io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Fprintf(out, "starting %d members...\n", len(cfg.OlricPorts))
	d, err := Start(ctx, cfg)
	if err != nil {
		if ctx.Err() != nil {
			return nil // interrupted while starting; Start cleaned up
		}
		return err
	}
	for i, u := range d.URLs() {
		fmt.Fprintf(out, "member %d: %s/  (API: %s/v1/quotes/random, Olric %s)\n", i+1, u, u, d.nodes[i].member.Name())
	}
	fmt.Fprintf(out, "limit: %d tokens, refill %d per minute, per X-API-Key (else per client address)\n",
		cfg.Limit.Capacity, cfg.Limit.RefillPerMinute)
	fmt.Fprintf(out, "try:  curl -i -H 'X-API-Key: demo' %s/v1/quotes/random\nCtrl-C to stop\n", d.URLs()[0])
	<-ctx.Done()
	stop() // a second Ctrl-C kills at once
	fmt.Fprintln(out, "shutting down...")
	sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	return d.Shutdown(sctx)
}

func parsePorts(s string) ([]int, error) {
	var ports []int
	for _, f := range strings.Split(s, ",") {
		p, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || p < 1 || p > 65533 {
			return nil, fmt.Errorf("bad port %q", f)
		}
		ports = append(ports, p)
	}
	return ports, nil
}
