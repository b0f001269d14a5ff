// Command cluster is the README's second quick start: a distributed bucket
// per client in an Olric grid embedded in every instance of the service.
// Start the first instance as it is; start others with -port and -join.
// SIGTERM or Ctrl-C stops it gracefully: it leaves the grid, handing its
// buckets over, instead of looking crashed to the other members.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/grid/olric"
	"github.com/bucketgrid/bucketgrid/httplimit"
)

func main() {
	port := flag.Int("port", 3420, "Olric port; the owner channel listens on port+1, gossip on port+2")
	join := flag.String("join", "", "gossip address (host:port) of a running instance, e.g. 127.0.0.1:3422")
	listen := flag.String("http", "127.0.0.1:8180", "HTTP address of the API")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	cfg := olric.DefaultLocalConfig() // loopback; DefaultLANConfig and BindAddr for a real network
	cfg.BindPort = *port
	if *join != "" {
		cfg.Peers = []string{*join}
	}
	member, err := olric.Start(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}

	m := bucketgrid.NewManager(member) // buckets expire a minute after they are full again
	limit, err := core.NewConfig(core.Greedy(100, 100, time.Minute).WithID("minute"))
	if err != nil {
		log.Fatal(err)
	}
	if err := ready(ctx, member, m, limit); err != nil {
		log.Fatal(err)
	}
	plan := httplimit.StaticPlan(limit) // or a func(key) (core.Config, error): free vs paid plans
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") })
	limiter := httplimit.New(httplimit.NewManaged(m, plan),
		// Fail-open (the default) serves a request unlimited when its bucket
		// cannot be consulted within 250 ms: say so, never silently.
		httplimit.WithErrorHook(func(r *http.Request, err error) {
			log.Printf("%s %s served without a limit: %v", r.Method, r.URL.Path, err)
		}))
	mux := http.NewServeMux()
	mux.Handle("/api/", limiter.Handler(api))
	srv := &http.Server{Addr: *listen, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.ListenAndServe() }()
	log.Printf("member %s serving http://%s/api/", member.Name(), *listen)

	select {
	case <-ctx.Done(): // SIGTERM or Ctrl-C
	case err = <-served: // the address is taken, for one
	}
	done, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	srv.Shutdown(done) // let requests in flight finish
	if lerr := member.Shutdown(done); lerr != nil {
		err = errors.Join(err, lerr)
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
	log.Print("left the grid")
}

// ready returns once this member answers for the keys it owns. A member
// that joins holds each partition it takes over for grid/olric's
// HandoverGrace (1.5 s) after it learns that it owns it, so that the old
// owner has stopped first; a request for a key there waits longer than the
// middleware's timeout and would be served unlimited. ready checks a bucket
// on a key this member owns until one answers; the API listens only then.
func ready(ctx context.Context, member *olric.Member, m *bucketgrid.Manager, limit core.Config) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	config := func(context.Context) (core.Config, error) { return limit, nil }
	for {
		for i := range 1000 { // 271 partitions: one of these keys is ours
			key := fmt.Sprintf("ready/%d", i)
			if member.Owner(key) != member.Name() {
				continue
			}
			if _, err := m.Bucket(key, config).AvailableTokens(ctx); err == nil {
				return nil
			}
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("member %s not ready: %w", member.Name(), ctx.Err())
		case <-time.After(50 * time.Millisecond): // the next routing read
		}
	}
}
