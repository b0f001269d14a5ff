package xds

import (
	"fmt"

	rlsconfpb "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"gopkg.in/yaml.v2"

	"github.com/bucketgrid/bucketgrid/policy/rulefile"
)

// TypeURL is the xDS type of a rate-limit configuration resource.
const TypeURL = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"

// Files turns the resources of one state-of-the-world response into the
// configuration files they stand for, one per resource, named after it:
// the YAML a file holding the same rules would hold, so that they are
// loaded, and refused, exactly as files are (as envoyproxy/ratelimit
// converts them). A resource of another type, or bytes that do not decode,
// is an error.
func Files(resources []*anypb.Any) ([]rulefile.File, error) {
	files := make([]rulefile.File, 0, len(resources))
	for i, r := range resources {
		if r.GetTypeUrl() != TypeURL {
			return nil, fmt.Errorf("resource %d: type %q, want %s", i, r.GetTypeUrl(), TypeURL)
		}
		var c rlsconfpb.RateLimitConfig
		if err := anypb.UnmarshalTo(r, &c, proto.UnmarshalOptions{}); err != nil {
			return nil, fmt.Errorf("resource %d: %w", i, err)
		}
		data, err := yaml.Marshal(yamlRoot{Domain: c.Domain, Descriptors: descriptors(c.Descriptors)})
		if err != nil {
			return nil, fmt.Errorf("resource %s: %w", c.Name, err)
		}
		name := c.Name
		if name == "" {
			name = fmt.Sprintf("resource %d", i)
		}
		files = append(files, rulefile.File{Name: "xds:" + name, Data: data})
	}
	return files, nil
}

// The YAML of envoyproxy/ratelimit's configuration files, the keys a
// resource can set.
type yamlRoot struct {
	Domain      string       `yaml:"domain"`
	Descriptors []descriptor `yaml:"descriptors,omitempty"`
}

type descriptor struct {
	Key            string       `yaml:"key"`
	Value          string       `yaml:"value,omitempty"`
	RateLimit      *rateLimit   `yaml:"rate_limit,omitempty"`
	Descriptors    []descriptor `yaml:"descriptors,omitempty"`
	ShadowMode     bool         `yaml:"shadow_mode,omitempty"`
	DetailedMetric bool         `yaml:"detailed_metric,omitempty"`
}

type rateLimit struct {
	RequestsPerUnit uint32    `yaml:"requests_per_unit"`
	Unit            string    `yaml:"unit,omitempty"`
	Unlimited       bool      `yaml:"unlimited,omitempty"`
	Name            string    `yaml:"name,omitempty"`
	Replaces        []replace `yaml:"replaces,omitempty"`
}

type replace struct {
	Name string `yaml:"name"`
}

func descriptors(pb []*rlsconfpb.RateLimitDescriptor) []descriptor {
	var out []descriptor
	for _, d := range pb {
		out = append(out, descriptor{Key: d.Key, Value: d.Value, RateLimit: rateLimitOf(d.RateLimit),
			Descriptors: descriptors(d.Descriptors), ShadowMode: d.ShadowMode, DetailedMetric: d.DetailedMetric})
	}
	return out
}

func rateLimitOf(p *rlsconfpb.RateLimitPolicy) *rateLimit {
	if p == nil {
		return nil
	}
	r := &rateLimit{RequestsPerUnit: p.RequestsPerUnit, Unlimited: p.Unlimited, Name: p.Name}
	// An unlimited policy leaves the unit unset (UNKNOWN), which a file
	// says by naming none; any other UNKNOWN is refused by name.
	if !p.Unlimited || p.Unit != rlsconfpb.RateLimitUnit_UNKNOWN {
		r.Unit = p.Unit.String()
	}
	for _, rp := range p.Replaces {
		r.Replaces = append(r.Replaces, replace{Name: rp.Name})
	}
	return r
}
