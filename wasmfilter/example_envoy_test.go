package wasmfilter_test

import (
	"encoding/json"
	"os"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	wasmhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"gopkg.in/yaml.v3"

	// Registers the router's typed configuration for protojson.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"

	"github.com/bucketgrid/bucketgrid/wasmfilter"
)

// TestExampleEnvoyYAML checks examples/envoy/envoy.yaml against Envoy's v3
// API (go-control-plane, test-only: never linked into the .wasm) and its
// plugin configuration against ParseConfig, since no Envoy binary runs here.
func TestExampleEnvoyYAML(t *testing.T) {
	raw, err := os.ReadFile("../examples/envoy/envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(doc)
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
	lst := boot.GetStaticResources().GetListeners()
	if len(lst) != 1 {
		t.Fatalf("%d listeners", len(lst))
	}
	var hcm hcmv3.HttpConnectionManager
	if err := lst[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		t.Fatal(err)
	}
	filters := hcm.GetHttpFilters()
	if len(filters) != 2 || filters[0].GetName() != "envoy.filters.http.wasm" || filters[1].GetName() != "envoy.filters.http.router" {
		t.Fatalf("http filters %v: want wasm then router", filters)
	}
	var w wasmhttpv3.Wasm
	if err := filters[0].GetTypedConfig().UnmarshalTo(&w); err != nil {
		t.Fatal(err)
	}
	vm := w.GetConfig().GetVmConfig()
	if vm.GetRuntime() != "envoy.wasm.runtime.v8" || vm.GetCode().GetLocal().GetFilename() != "wasmfilter/filter.wasm" {
		t.Fatalf("vm_config: %v", vm)
	}
	var plugin wrapperspb.StringValue
	if err := w.GetConfig().GetConfiguration().UnmarshalTo(&plugin); err != nil {
		t.Fatal(err)
	}
	c, err := wasmfilter.ParseConfig([]byte(plugin.GetValue()))
	if err != nil {
		t.Fatalf("plugin configuration: %v", err)
	}
	if c.Domain != "edge" || len(c.RateLimits) != 3 || len(c.Rules) != 1 {
		t.Fatalf("plugin configuration: domain %q, %d rate_limits, %d rule documents", c.Domain, len(c.RateLimits), len(c.Rules))
	}
	// The filter normalises what its matchers see; Envoy normalises what it
	// forwards, so the upstream serves the path that was counted.
	if !hcm.GetNormalizePath().GetValue() || !hcm.GetMergeSlashes() ||
		hcm.GetPathWithEscapedSlashesAction() != hcmv3.HttpConnectionManager_UNESCAPE_AND_REDIRECT {
		t.Fatalf("connection manager: normalize_path %v, merge_slashes %v, path_with_escaped_slashes_action %v",
			hcm.GetNormalizePath(), hcm.GetMergeSlashes(), hcm.GetPathWithEscapedSlashesAction())
	}
}
