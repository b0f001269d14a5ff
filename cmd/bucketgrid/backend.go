package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/cas/memstore"
	"github.com/bucketgrid/bucketgrid/grid/olric"
)

// backend is where the buckets live.
type backend struct {
	exec     bucketgrid.Executor
	store    cas.Store // the store under exec, when a store URI names it
	close    func(context.Context) error
	describe string // appended to the ready line
}

// newBackend prepares s.Backend, the embedded grid, this process's memory
// or a CAS store named by its URI, reading the files the grid flags name
// (its secrets); open then starts it, or connects to the store.
func newBackend(s settings, logs io.Writer) (open func(context.Context) (*backend, error), err error) {
	switch s.Backend {
	case "grid":
		cfg, err := gridConfig(s.Grid)
		if err != nil {
			return nil, err
		}
		if s.Grid.Verbose {
			cfg.LogOutput = logs
		}
		return func(ctx context.Context) (*backend, error) { return startGrid(ctx, cfg) }, nil
	case "memory":
		return func(context.Context) (*backend, error) {
			return &backend{exec: cas.New(memstore.New()), close: func(context.Context) error { return nil }}, nil
		}, nil
	}
	return func(ctx context.Context) (*backend, error) { return openStore(ctx, s.Backend) }, nil
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
	var names []string
	cfg.Peers, names = splitPeers(g.Peers)
	if len(names) > 0 {
		cfg.Discover = dnsDiscovery(names, port+2) // every instance's gossip port is its -grid-bind port + 2
	}
	cfg.ReplicaCount = g.Replicas
	if g.JoinTimeout > 0 {
		cfg.JoinTimeout = g.JoinTimeout
	}
	cfg.TLSCertFile, cfg.TLSKeyFile, cfg.TLSCAFile = g.TLSCert, g.TLSKey, g.TLSCA
	cfg.RevokedFile = g.TLSRevoked
	cfg.Insecure = g.Insecure
	cfg.Leases.Enabled, cfg.Leases.Exact = g.Leases == leasesAll, g.Leases == leasesExact
	if g.LeaseLifetime > 0 {
		cfg.Leases.Lifetime = g.LeaseLifetime
	}
	if g.SecretFile != "" {
		if cfg.ChannelSecret, err = readBase64Secret(g.SecretFile); err != nil {
			return cfg, fmt.Errorf("-grid-secret-file: %w", err)
		}
	}
	if g.PasswordFile != "" {
		pw, err := readSecret(g.PasswordFile)
		if err != nil {
			return cfg, fmt.Errorf("-grid-password-file: %w", err)
		}
		cfg.Password = string(pw)
	}
	if g.GossipKeyFile != "" {
		if cfg.GossipKeys, err = readGossipKeys(g.GossipKeyFile); err != nil {
			return cfg, fmt.Errorf("-grid-gossip-key-file: %w", err)
		}
	}
	return cfg, nil
}

// readSecret returns a file's contents without a trailing line break.
func readSecret(name string) ([]byte, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	b = bytes.TrimRight(b, "\r\n")
	if len(b) == 0 {
		return nil, fmt.Errorf("%s is empty", name)
	}
	return b, nil
}

// readBase64Secret reads a secret written in base64 (`openssl rand
// -base64 32`) and returns its bytes.
func readBase64Secret(name string) ([]byte, error) {
	b, err := readSecret(name)
	if err != nil {
		return nil, err
	}
	k, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, fmt.Errorf("%s is not base64 (make one with `openssl rand -base64 32`)", name)
	}
	return k, nil
}

// readGossipKeys reads base64 keys, one a line; blank lines and lines
// starting with # are skipped.
func readGossipKeys(name string) ([][]byte, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	var keys [][]byte
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, err := base64.StdEncoding.DecodeString(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: not base64", i+1)
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%s holds no key", name)
	}
	return keys, nil
}

// startGrid starts the grid member cfg describes.
func startGrid(ctx context.Context, cfg olric.Config) (*backend, error) {
	m, err := olric.Start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	describe := " member=" + m.Name()
	if ms, err := m.Client().Members(ctx); err == nil {
		describe += fmt.Sprintf(" members=%d", len(ms)) // as this member's gossip knows them now
	}
	return &backend{exec: m, close: m.Shutdown, describe: describe}, nil
}
