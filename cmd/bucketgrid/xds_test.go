package main

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconfpb "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	policysvc "github.com/envoyproxy/go-control-plane/ratelimit/service/ratelimit/v3"
	"google.golang.org/grpc"
)

// controlPlane is go-control-plane's own xDS server (its snapshot cache
// and state-of-the-world server), serving both the aggregated discovery
// service and RateLimitConfigDiscoveryService on loopback, and recording
// every request it receives.
type controlPlane struct {
	addr  string
	cache cachev3.SnapshotCache
	mu    sync.Mutex
	reqs  []*discoverypb.DiscoveryRequest
}

func startControlPlane(t *testing.T) *controlPlane {
	t.Helper()
	cp := &controlPlane{cache: cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil)}
	ctx, cancel := context.WithCancel(context.Background())
	srv := serverv3.NewServer(ctx, cp.cache, serverv3.CallbackFuncs{
		StreamRequestFunc: func(_ int64, r *discoverypb.DiscoveryRequest) error {
			cp.mu.Lock()
			defer cp.mu.Unlock()
			cp.reqs = append(cp.reqs, r)
			return nil
		},
	})
	gs := grpc.NewServer()
	discoverypb.RegisterAggregatedDiscoveryServiceServer(gs, srv)
	policysvc.RegisterRateLimitConfigDiscoveryServiceServer(gs, srv)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cp.addr = ln.Addr().String()
	go gs.Serve(ln)
	t.Cleanup(func() {
		gs.Stop()
		cancel()
	})
	return cp
}

// publish makes configs the state of the world for node, as version.
func (cp *controlPlane) publish(t *testing.T, node, version string, configs ...*rlsconfpb.RateLimitConfig) {
	t.Helper()
	var rs []types.Resource
	for _, c := range configs {
		rs = append(rs, c)
	}
	snap, err := cachev3.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: rs})
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.cache.SetSnapshot(context.Background(), node, snap); err != nil {
		t.Fatal(err)
	}
}

// waitRequest waits for a request the server received that satisfies ok.
func (cp *controlPlane) waitRequest(t *testing.T, what string, ok func(*discoverypb.DiscoveryRequest) bool) *discoverypb.DiscoveryRequest {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		cp.mu.Lock()
		for _, r := range cp.reqs {
			if ok(r) {
				cp.mu.Unlock()
				return r
			}
		}
		cp.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("the xDS server never received %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func hourly(name, domain, key string, perHour uint32) *rlsconfpb.RateLimitConfig {
	return &rlsconfpb.RateLimitConfig{Name: name, Domain: domain, Descriptors: []*rlsconfpb.RateLimitDescriptor{{
		Key: key, RateLimit: &rlsconfpb.RateLimitPolicy{Unit: rlsconfpb.RateLimitUnit_HOUR, RequestsPerUnit: perHour},
	}}}
}

// TestConfigFromXDS: with -config-xds the service takes its rules from
// go-control-plane's xDS server, over either discovery service: a
// configuration that loads is acknowledged and answered with; one that
// does not (the same check as for files) is refused with the reason, and
// the last good one stays; the next good one replaces it.
func TestConfigFromXDS(t *testing.T) {
	for _, api := range []string{"ads", "rls"} {
		t.Run(api, func(t *testing.T) {
			cp := startControlPlane(t)
			node := "bucketgrid-" + api
			cp.publish(t, node, "1", hourly("shop", "shop", "k", 1))
			in := startInstance(t, "-config-xds", cp.addr, "-config-xds-node", node, "-config-xds-api", api,
				"-grpc-addr", "127.0.0.1:0", "-http-addr", "", "-backend", "memory")
			c := client(t, in.grpcAddr)
			code := func(domain, key, value string) string {
				t.Helper()
				r, err := call(c, req(domain, key, value))
				if err != nil {
					t.Fatal(err)
				}
				return r.OverallCode.String()
			}
			if a, b := code("shop", "k", "v"), code("shop", "k", "v"); a != "OK" || b != "OVER_LIMIT" {
				t.Fatalf("version 1, 1 an hour: %s then %s, want OK then OVER_LIMIT", a, b)
			}
			cp.waitRequest(t, "the ACK of version 1", func(r *discoverypb.DiscoveryRequest) bool {
				return r.VersionInfo == "1" && r.ResponseNonce != "" && r.ErrorDetail == nil && r.GetNode().GetId() == node
			})

			bad := hourly("shop", "shop", "", 5) // a descriptor without a key
			cp.publish(t, node, "2", bad)
			nack := cp.waitRequest(t, "the NACK of version 2", func(r *discoverypb.DiscoveryRequest) bool { return r.ErrorDetail != nil })
			if nack.VersionInfo != "1" || !strings.Contains(nack.ErrorDetail.Message, "xds:shop: descriptor has empty key") {
				t.Fatalf("NACK: version %q, %q; want version 1 kept and the file loader's message", nack.VersionInfo, nack.ErrorDetail.Message)
			}
			if got := code("shop", "k", "v"); got != "OVER_LIMIT" {
				t.Fatalf("after the refused version 2: %s, want version 1 still in force (OVER_LIMIT)", got)
			}

			cp.publish(t, node, "3", hourly("shop", "shop", "other", 2), hourly("api", "api", "key", 1))
			deadline := time.Now().Add(60 * time.Second)
			for code("api", "key", "x") != "OVER_LIMIT" { // an unknown domain is answered OK, unlimited
				if time.Now().After(deadline) {
					t.Fatal("version 3 never took effect")
				}
				time.Sleep(20 * time.Millisecond)
			}
			cp.waitRequest(t, "the ACK of version 3", func(r *discoverypb.DiscoveryRequest) bool { return r.VersionInfo == "3" && r.ErrorDetail == nil })
		})
	}
}
