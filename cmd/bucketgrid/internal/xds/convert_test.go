package xds

import (
	"strings"
	"testing"

	rlsconfpb "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/bucketgrid/bucketgrid/policy"
	"github.com/bucketgrid/bucketgrid/policy/rulefile"
)

// TestFiles: a resource becomes the YAML file with the same rules, which
// loads as that file does; an unlimited policy names no unit; a policy
// without a unit is refused with the file loader's message; a resource of
// another type is an error.
func TestFiles(t *testing.T) {
	res := func(c *rlsconfpb.RateLimitConfig) *anypb.Any {
		a, err := anypb.New(c)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	good := res(&rlsconfpb.RateLimitConfig{Name: "shop", Domain: "shop", Descriptors: []*rlsconfpb.RateLimitDescriptor{
		{Key: "remote_address", RateLimit: &rlsconfpb.RateLimitPolicy{Unit: rlsconfpb.RateLimitUnit_MINUTE, RequestsPerUnit: 60, Name: "per-ip"}},
		{Key: "api_key", Value: "partner", ShadowMode: true, DetailedMetric: true,
			RateLimit: &rlsconfpb.RateLimitPolicy{Unit: rlsconfpb.RateLimitUnit_SECOND, RequestsPerUnit: 100, Replaces: []*rlsconfpb.RateLimitReplace{{Name: "per-ip"}}}},
		{Key: "internal", RateLimit: &rlsconfpb.RateLimitPolicy{Unlimited: true}},
		{Key: "path", Descriptors: []*rlsconfpb.RateLimitDescriptor{{Key: "method", Value: "POST",
			RateLimit: &rlsconfpb.RateLimitPolicy{Unit: rlsconfpb.RateLimitUnit_DAY, RequestsPerUnit: 3}}}},
	}})
	files, err := Files([]*anypb.Any{good})
	if err != nil {
		t.Fatal(err)
	}
	want := `domain: shop
descriptors:
- key: remote_address
  rate_limit:
    requests_per_unit: 60
    unit: MINUTE
    name: per-ip
- key: api_key
  value: partner
  rate_limit:
    requests_per_unit: 100
    unit: SECOND
    replaces:
    - name: per-ip
  shadow_mode: true
  detailed_metric: true
- key: internal
  rate_limit:
    requests_per_unit: 0
    unlimited: true
- key: path
  descriptors:
  - key: method
    value: POST
    rate_limit:
      requests_per_unit: 3
      unit: DAY
`
	if len(files) != 1 || files[0].Name != "xds:shop" || string(files[0].Data) != want {
		t.Fatalf("files %v:\n%s\nwant xds:shop:\n%s", len(files), files[0].Data, want)
	}
	if _, err := rulefile.Load(files, policy.Options{}); err != nil {
		t.Fatalf("the converted resource: %v", err)
	}

	noUnit, err := Files([]*anypb.Any{res(&rlsconfpb.RateLimitConfig{Name: "x", Domain: "x", Descriptors: []*rlsconfpb.RateLimitDescriptor{
		{Key: "k", RateLimit: &rlsconfpb.RateLimitPolicy{RequestsPerUnit: 1}}}})})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rulefile.Load(noUnit, policy.Options{}); err == nil || err.Error() != "xds:x: invalid rate limit unit 'UNKNOWN'" {
		t.Fatalf("a policy without a unit: %v", err)
	}
	other, _ := anypb.New(durationpb.New(1))
	if _, err := Files([]*anypb.Any{good, other}); err == nil || !strings.Contains(err.Error(), "resource 1") {
		t.Fatalf("a resource of another type: %v", err)
	}
}
