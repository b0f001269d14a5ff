package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/bucketgrid/bucketgrid/cmd/bucketgrid/internal/loader"
	"github.com/bucketgrid/bucketgrid/cmd/bucketgrid/internal/xds"
	"github.com/bucketgrid/bucketgrid/policy"
)

// xdsFlags configure -config-xds, the rules from an xDS management server.
type xdsFlags struct {
	Addr string // the server's host:port; empty reads -config instead
	Node string // node ID; default the host name
	API  string // ads or rls
	CA   string // PEM file of the server's CA; empty is plaintext
}

// rules is where the rules come from: files or an xDS management server.
// Either way a configuration is loaded by rulefile.Load, and one that does
// not load is refused and the last good one stays.
type rules struct {
	// first returns the first configuration: the files as they are, or
	// the first one the server sends that loads.
	first func(ctx context.Context) (*policy.Rules, error)
	// watch reports every later configuration until ctx ends.
	watch func(ctx context.Context, loaded func(*policy.Rules), failed func(error))
	close func()
	from  []any // for the log
}

func openRules(c settings, log *slog.Logger) (*rules, error) {
	if c.XDS.Addr == "" {
		ld := &loader.Loader{Paths: c.ConfigPaths, Options: c.Rules}
		return &rules{
			first: func(context.Context) (*policy.Rules, error) { return ld.Load() },
			watch: func(ctx context.Context, loaded func(*policy.Rules), failed func(error)) {
				ld.Watch(ctx, c.ReloadInterval, loaded, failed)
			},
			close: func() {},
			from:  []any{"paths", c.ConfigPaths},
		}, nil
	}
	return openXDS(c, log)
}

// openXDS follows the rules of -config-xds.
func openXDS(c settings, log *slog.Logger) (*rules, error) {
	api, err := xds.ParseAPI(c.XDS.API)
	if err != nil {
		return nil, fmt.Errorf("-config-xds-api: %w", err)
	}
	conn, err := dialXDS(c.XDS)
	if err != nil {
		return nil, err
	}
	node := c.XDS.Node
	if node == "" {
		node, _ = os.Hostname()
	}
	type event struct {
		cfg *policy.Rules
		err error
	}
	events := make(chan event)
	runCtx, stop := context.WithCancel(context.Background())
	send := func(e event) {
		select {
		case events <- e:
		case <-runCtx.Done():
		}
	}
	src := &xds.Source{Conn: conn, API: api, Node: &corepb.Node{Id: node}, Options: c.Rules,
		Loaded: func(cfg *policy.Rules, version string) {
			log.Info("xDS configuration accepted", "version", version)
			send(event{cfg: cfg})
		},
		Failed: func(err error) { send(event{err: err}) },
	}
	done := make(chan struct{})
	go func() { src.Run(runCtx); close(done) }()
	return &rules{
		first: func(ctx context.Context) (*policy.Rules, error) {
			log.Info("waiting for the first configuration from the xDS server", "server", c.XDS.Addr, "node", node, "api", api)
			for {
				select {
				case e := <-events:
					if e.err == nil {
						return e.cfg, nil
					}
					log.Error("no configuration yet", "err", e.err)
				case <-ctx.Done():
					return nil, fmt.Errorf("no configuration from %s: %w", c.XDS.Addr, ctx.Err())
				}
			}
		},
		watch: func(ctx context.Context, loaded func(*policy.Rules), failed func(error)) {
			for {
				select {
				case e := <-events:
					if e.err != nil {
						failed(e.err)
					} else {
						loaded(e.cfg)
					}
				case <-ctx.Done():
					return
				}
			}
		},
		close: func() {
			stop()
			<-done
			conn.Close()
		},
		from: []any{"xds", c.XDS.Addr, "node", node},
	}, nil
}

// dialXDS returns a connection to the xDS server, over TLS with a CA file.
func dialXDS(x xdsFlags) (*grpc.ClientConn, error) {
	creds := insecure.NewCredentials()
	if x.CA != "" {
		var err error
		if creds, err = credentials.NewClientTLSFromFile(x.CA, ""); err != nil {
			return nil, fmt.Errorf("-config-xds-ca: %w", err)
		}
	}
	conn, err := grpc.NewClient(x.Addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, fmt.Errorf("-config-xds: %w", err)
	}
	return conn, nil
}
