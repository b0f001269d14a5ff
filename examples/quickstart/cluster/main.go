// Command cluster is the README's second quick start: a distributed bucket
// per client in an Olric grid embedded in every instance of the service.
// Start the first instance as it is; start others with -port and -join.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/grid/olric"
	"github.com/bucketgrid/bucketgrid/httplimit"
)

func main() {
	port := flag.Int("port", 3320, "Olric port; the owner channel listens on port+1, gossip on port+2")
	join := flag.String("join", "", "gossip address (host:port) of a running instance, e.g. 127.0.0.1:3322")
	listen := flag.String("http", "127.0.0.1:8080", "HTTP address of the API")
	flag.Parse()
	ctx := context.Background()

	cfg := olric.DefaultLocalConfig() // loopback; DefaultLANConfig and BindAddr for a real network
	cfg.BindPort = *port
	if *join != "" {
		cfg.Peers = []string{*join}
	}
	member, err := olric.Start(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer member.Shutdown(ctx)

	m := bucketgrid.NewManager(member) // buckets expire a minute after they are full again
	limit, err := core.NewConfig(core.Greedy(100, 100, time.Minute).WithID("minute"))
	if err != nil {
		log.Fatal(err)
	}
	plan := httplimit.StaticPlan(limit) // or a func(key) (core.Config, error): free vs paid plans
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") })
	http.Handle("/api/", httplimit.New(httplimit.NewManaged(m, plan)).Handler(api))
	log.Fatal(http.ListenAndServe(*listen, nil))
}
