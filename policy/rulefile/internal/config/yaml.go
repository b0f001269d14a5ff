// Package config holds the YAML shapes of envoyproxy/ratelimit's
// configuration files. It is named config, and its types carry the same names
// as envoyproxy/ratelimit's, because gopkg.in/yaml.v2 puts the Go type into
// its type-mismatch errors ("cannot unmarshal !!str `x` into
// config.YamlRateLimit"): with these names a bad file is reported in exactly
// the words envoyproxy/ratelimit uses.
package config

// YamlRoot is one configuration file: a domain and its descriptors.
type YamlRoot struct {
	Domain      string           `yaml:"domain"`
	Descriptors []YamlDescriptor `yaml:"descriptors"`
}

// YamlDescriptor is one node of the descriptor tree.
type YamlDescriptor struct {
	Key            string           `yaml:"key"`
	Value          string           `yaml:"value"`
	RateLimit      *YamlRateLimit   `yaml:"rate_limit"`
	Descriptors    []YamlDescriptor `yaml:"descriptors"`
	ShadowMode     bool             `yaml:"shadow_mode"`
	QuotaMode      bool             `yaml:"quota_mode"`
	DetailedMetric bool             `yaml:"detailed_metric"`
	ValueToMetric  bool             `yaml:"value_to_metric"`
	ShareThreshold bool             `yaml:"share_threshold"`
}

// YamlRateLimit is a descriptor's limit. Algorithm and Burst are
// bucketgrid's additions; the other fields are envoyproxy/ratelimit's.
type YamlRateLimit struct {
	RequestsPerUnit uint32         `yaml:"requests_per_unit"`
	Unit            string         `yaml:"unit"`
	Unlimited       bool           `yaml:"unlimited"`
	Name            string         `yaml:"name"`
	Replaces        []yamlReplaces `yaml:"replaces"`
	Algorithm       string         `yaml:"algorithm"`
	Burst           uint32         `yaml:"burst"`
}

type yamlReplaces struct {
	Name string `yaml:"name"`
}

// ReplacesNames returns the names of r's replaces entries, in order.
func (r *YamlRateLimit) ReplacesNames() []string {
	names := make([]string, len(r.Replaces))
	for i, e := range r.Replaces {
		names[i] = e.Name
	}
	return names
}

// ValidKeys are the mapping keys a file may use anywhere: envoyproxy/ratelimit's
// set plus bucketgrid's algorithm and burst.
var ValidKeys = map[string]bool{
	"domain":            true,
	"key":               true,
	"value":             true,
	"descriptors":       true,
	"rate_limit":        true,
	"unit":              true,
	"requests_per_unit": true,
	"unlimited":         true,
	"shadow_mode":       true,
	"quota_mode":        true,
	"name":              true,
	"replaces":          true,
	"detailed_metric":   true,
	"value_to_metric":   true,
	"share_threshold":   true,
	"algorithm":         true,
	"burst":             true,
}
