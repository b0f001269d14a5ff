package main

import (
	"encoding/json"
	"fmt"
	"os"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"gopkg.in/yaml.v2"

	// The typed configurations envoy.yaml uses, registered for protojson.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"

	"github.com/bucketgrid/bucketgrid/cmd/bucketgrid/internal/loader"
	"github.com/bucketgrid/bucketgrid/policy"
)

const exampleDir = "../../examples/envoy-global"

// jsonable turns yaml.v2's maps into maps encoding/json accepts.
func jsonable(v any) any {
	switch v := v.(type) {
	case map[any]any:
		m := make(map[string]any, len(v))
		for k, e := range v {
			m[fmt.Sprint(k)] = jsonable(e)
		}
		return m
	case []any:
		for i := range v {
			v[i] = jsonable(v[i])
		}
	}
	return v
}

// TestExampleEnvoyGlobal checks examples/envoy-global against Envoy's v3 API
// (no Envoy binary runs here: the bootstrap is unmarshalled into
// go-control-plane's types and validated with their rules), then checks that
// every descriptor its route actions can produce is answered by the
// example's bucketgrid configuration as intended.
func TestExampleEnvoyGlobal(t *testing.T) {
	raw, err := os.ReadFile(exampleDir + "/envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(jsonable(doc))
	if err != nil {
		t.Fatal(err)
	}
	var boot bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(js, &boot); err != nil {
		t.Fatalf("not an Envoy v3 bootstrap: %v", err)
	}
	if err := boot.ValidateAll(); err != nil {
		t.Fatalf("bootstrap fails validation: %v", err)
	}

	var hcm hcmv3.HttpConnectionManager
	if err := boot.GetStaticResources().GetListeners()[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		t.Fatal(err)
	}
	filters := hcm.GetHttpFilters()
	if len(filters) != 2 || filters[0].GetName() != "envoy.filters.http.ratelimit" {
		t.Fatalf("http filters %v: want the rate-limit filter first", filters)
	}
	var rl ratelimitv3.RateLimit
	if err := filters[0].GetTypedConfig().UnmarshalTo(&rl); err != nil {
		t.Fatal(err)
	}
	// the Anys are not validated with the bootstrap: validate what they hold
	if err := hcm.ValidateAll(); err != nil {
		t.Fatalf("http_connection_manager: %v", err)
	}
	if err := rl.ValidateAll(); err != nil {
		t.Fatalf("rate-limit filter: %v", err)
	}
	svc := rl.GetRateLimitService()
	if rl.GetDomain() != "shop" || svc.GetGrpcService().GetEnvoyGrpc().GetClusterName() != "bucketgrid" {
		t.Fatalf("rate-limit filter: %v", &rl)
	}
	var cluster bool
	for _, c := range boot.GetStaticResources().GetClusters() {
		if c.GetName() == "bucketgrid" {
			cluster = len(c.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()) == 3 &&
				c.GetHealthChecks()[0].GetGrpcHealthCheck().GetServiceName() == rlspb.RateLimitService_ServiceDesc.ServiceName
		}
	}
	if !cluster {
		t.Fatal("no bucketgrid cluster of three instances with a gRPC health check")
	}

	ld := &loader.Loader{Paths: []string{exampleDir + "/ratelimit"}}
	cfg, err := ld.Load()
	if err != nil {
		t.Fatalf("the example's bucketgrid configuration: %v", err)
	}
	// every rate_limits entry of every route, as the descriptor Envoy
	// sends, with a value for each action
	values := map[string]string{"remote_address": "203.0.113.7", "api_key": "k-123"}
	routes := hcm.GetRouteConfig().GetVirtualHosts()[0].GetRoutes()
	n := 0
	for _, r := range routes {
		for _, limits := range r.GetRoute().GetRateLimits() {
			var entries []policy.Entry
			for _, a := range limits.GetActions() {
				entries = append(entries, entryOf(t, a, values))
			}
			rule, ok := cfg.Match(rl.GetDomain(), entries, nil)
			if !ok {
				t.Errorf("route %s: descriptor %v matches no rule", r.GetMatch().GetPrefix(), entries)
				continue
			}
			n++
			t.Logf("route %s: %v → %s, %d per %v (%v)", r.GetMatch().GetPrefix(), entries, rule.Path,
				rule.RequestsPerUnit, rule.Unit, rule.Algorithm)
		}
	}
	if n != 4 {
		t.Fatalf("%d descriptors matched, want 4", n)
	}
	for value, want := range map[string]uint32{"partner-acme": 200, "revoked-key": 0, "plain": 20} {
		if r, ok := cfg.Match("shop", []policy.Entry{{Key: "api_key", Value: value}}, nil); !ok || r.RequestsPerUnit != want {
			t.Errorf("api_key %s: %v %d, want %d", value, ok, r.RequestsPerUnit, want)
		}
	}
}

// entryOf is the descriptor entry Envoy builds for action a.
func entryOf(t *testing.T, a *routev3.RateLimit_Action, values map[string]string) policy.Entry {
	t.Helper()
	switch {
	case a.GetRemoteAddress() != nil:
		return policy.Entry{Key: "remote_address", Value: values["remote_address"]}
	case a.GetRequestHeaders() != nil:
		k := a.GetRequestHeaders().GetDescriptorKey()
		return policy.Entry{Key: k, Value: values[k]}
	case a.GetGenericKey() != nil:
		k := a.GetGenericKey().GetDescriptorKey()
		if k == "" {
			k = "generic_key"
		}
		return policy.Entry{Key: k, Value: a.GetGenericKey().GetDescriptorValue()}
	case a.GetHeaderValueMatch() != nil:
		k := a.GetHeaderValueMatch().GetDescriptorKey()
		if k == "" {
			k = "header_match"
		}
		return policy.Entry{Key: k, Value: a.GetHeaderValueMatch().GetDescriptorValue()}
	}
	t.Fatalf("action %v: not covered by this test", a)
	return policy.Entry{}
}
