package main

import (
	"context"
	"fmt"
	"io"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/cas/memstore"
	"github.com/bucketgrid/bucketgrid/grid/olric"
)

// backend is where the buckets live.
type backend struct {
	exec     bucketgrid.Executor
	close    func(context.Context) error
	describe string // appended to the ready line
}

// openBackend opens c.Backend: the embedded grid, this process's memory, or
// a CAS store named by its URI.
func openBackend(ctx context.Context, c config, logs io.Writer) (*backend, error) {
	switch c.Backend {
	case "grid":
		return openGrid(ctx, c.Grid, logs)
	case "memory":
		return &backend{exec: cas.New(memstore.New()), close: func(context.Context) error { return nil }}, nil
	}
	return openStore(ctx, c.Backend)
}

// gridConfig is the member configuration the grid flags describe.
func gridConfig(g gridFlags) (olric.Config, error) {
	host, port, err := splitHostPort(g.Bind)
	if err != nil {
		return olric.Config{}, fmt.Errorf("-grid-bind: %w", err)
	}
	cfg := olric.DefaultLocalConfig()
	if g.Env == "lan" {
		cfg = olric.DefaultLANConfig()
	}
	cfg.BindAddr, cfg.BindPort = host, port // the owner channel takes port+1, gossip port+2
	cfg.Peers = g.Peers
	cfg.ReplicaCount = g.Replicas
	return cfg, nil
}

func openGrid(ctx context.Context, g gridFlags, logs io.Writer) (*backend, error) {
	cfg, err := gridConfig(g)
	if err != nil {
		return nil, err
	}
	if g.Verbose {
		cfg.LogOutput = logs
	}
	m, err := olric.Start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &backend{exec: m, close: m.Shutdown, describe: " member=" + m.Name()}, nil
}
