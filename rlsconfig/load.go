package rlsconfig

import (
	"fmt"
	"strings"

	"gopkg.in/yaml.v2"

	"github.com/bucketgrid/bucketgrid/rlsconfig/internal/config"
)

// File is one configuration file: its name, used in error messages, and its
// YAML contents.
type File struct {
	Name string
	Data []byte
}

// Error reports why a configuration was rejected. Its text is
// "name: reason", where name is the File's and reason is, for every check
// envoyproxy/ratelimit makes, that service's own wording ("descriptor has
// empty key", "config error, unknown key 'ratelimit'", …), so the same bad
// file gets the same message from either service.
type Error struct {
	File   string
	Reason string
}

func (e *Error) Error() string { return e.File + ": " + e.Reason }

// Options are the service-wide settings a configuration is loaded with. The
// zero value is envoyproxy/ratelimit's default: domains may not be split
// across files and every limit is a fixed window.
type Options struct {
	// MergeDomains lets several files configure one domain, their
	// descriptors merged (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG); a key
	// configured twice is still an error. Without it a domain in two files
	// is an error.
	MergeDomains bool
	// Algorithm is the algorithm of every limit that does not name one, and
	// of Envoy's per-descriptor limit overrides.
	Algorithm Algorithm
	// NearLimitRatio is the fraction of a limit above which hits count as
	// near the limit in Status; 0 means envoyproxy/ratelimit's 0.8.
	NearLimitRatio float32
}

// Limit is a configured (or overriding) limit.
type Limit struct {
	// RequestsPerUnit is the number of hits a unit admits; 0 refuses every
	// hit.
	RequestsPerUnit uint32
	// Unit is the time unit; UnitUnknown when Unlimited.
	Unit Unit
	// Unlimited admits everything without counting.
	Unlimited bool
	// Name names the limit for Replaces; empty for none.
	Name string
	// Replaces are the names of limits this one switches off when both apply
	// to one request.
	Replaces []string
	// Algorithm is how hits are counted.
	Algorithm Algorithm
	// Burst is the token bucket's capacity; 0 means RequestsPerUnit. Only
	// TokenBucket uses it.
	Burst uint32
}

// Capacity returns the most hits the limit admits at once: Burst (or
// RequestsPerUnit) for a token bucket, RequestsPerUnit for a fixed window.
func (l *Limit) Capacity() uint32 {
	if l.Algorithm == TokenBucket && l.Burst > 0 {
		return l.Burst
	}
	return l.RequestsPerUnit
}

// maxPerSecond is the largest requests_per_unit per second a bucket can
// refill: core refills at most one token per nanosecond, and a fixed window
// stores one token more than its limit.
const maxPerSecond = 999_999_999

// Config is a loaded, validated configuration: the descriptor trees of every
// domain. It is immutable and safe for concurrent use.
type Config struct {
	domains map[string]*node
	opts    Options
}

// node is one level of a domain's descriptor tree.
type node struct {
	children  map[string]*node // by "key" or "key_value"
	wildcards []string         // children keys ending in '*', in file order
	limit     *Limit
	name      string // "key" or "key_value", as in its parent's children
	path      string // domain.key_value.key… of this node, from the file only

	shadow, quota, detailed, valueToMetric, shareThreshold bool
}

// Load parses and validates files as envoyproxy/ratelimit does, with the
// same error for every file it rejects, and returns the configuration. The
// first error found is returned as an *Error; nothing is partly loaded.
func Load(files []File, opts Options) (*Config, error) {
	c := &Config{domains: map[string]*node{}, opts: opts}
	if c.opts.NearLimitRatio == 0 {
		c.opts.NearLimitRatio = 0.8
	}
	for _, f := range files {
		if err := c.load(f); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// HasDomain reports whether domain is configured.
func (c *Config) HasDomain(domain string) bool { return c.domains[domain] != nil }

// Domains returns the number of domains configured.
func (c *Config) Domains() int { return len(c.domains) }

// Options returns the options c was loaded with, NearLimitRatio filled in.
func (c *Config) Options() Options { return c.opts }

func (c *Config) load(f File) error {
	root, err := parse(f)
	if err != nil {
		return err
	}
	if root.Domain == "" {
		return &Error{f.Name, "config file cannot have empty domain"}
	}
	d, ok := c.domains[root.Domain]
	if ok && !c.opts.MergeDomains {
		return &Error{f.Name, fmt.Sprintf("duplicate domain '%s' in config file", root.Domain)}
	}
	if !ok {
		d = &node{children: map[string]*node{}, path: root.Domain}
	}
	if err := c.loadDescriptors(f.Name, d, root.Domain+".", root.Descriptors); err != nil {
		return err
	}
	c.domains[root.Domain] = d
	return nil
}

// parse checks every mapping key of f, then decodes it.
func parse(f File) (*config.YamlRoot, error) {
	var generic map[interface{}]interface{}
	if err := yaml.Unmarshal(f.Data, &generic); err != nil {
		return nil, &Error{f.Name, "error loading config file: " + err.Error()}
	}
	if err := validateKeys(f.Name, generic); err != nil {
		return nil, err
	}
	var root config.YamlRoot
	if err := yaml.Unmarshal(f.Data, &root); err != nil {
		return nil, &Error{f.Name, "error loading config file: " + err.Error()}
	}
	return &root, nil
}

// validateKeys rejects unknown or non-string keys and lists of anything but
// mappings, anywhere in the document.
func validateKeys(file string, m map[interface{}]interface{}) error {
	for k, v := range m {
		ks, ok := k.(string)
		if !ok {
			return &Error{file, fmt.Sprintf("config error, key is not of type string: %v", k)}
		}
		if !config.ValidKeys[ks] {
			return &Error{file, fmt.Sprintf("config error, unknown key '%s'", ks)}
		}
		switch v := v.(type) {
		case []interface{}:
			for _, e := range v {
				em, ok := e.(map[interface{}]interface{})
				if !ok {
					return &Error{file, fmt.Sprintf("config error, yaml file contains list of type other than map: %v", e)}
				}
				if err := validateKeys(file, em); err != nil {
					return err
				}
			}
		case map[interface{}]interface{}:
			if err := validateKeys(file, v); err != nil {
				return err
			}
		case string, int, bool, nil:
		default:
			return &Error{file, "error checking config"}
		}
	}
	return nil
}

// loadDescriptors adds descriptors under parent, whose full key is
// parentKey (ending in '.'), checking each as envoyproxy/ratelimit does and
// in the same order, so the first error reported is the same.
func (c *Config) loadDescriptors(file string, parent *node, parentKey string, descriptors []config.YamlDescriptor) error {
	for i := range descriptors {
		yd := &descriptors[i]
		if yd.Key == "" {
			return &Error{file, "descriptor has empty key"}
		}
		finalKey := yd.Key
		if yd.Value != "" {
			finalKey += "_" + yd.Value
		}
		fullKey := parentKey + finalKey
		if _, dup := parent.children[finalKey]; dup {
			return &Error{file, fmt.Sprintf("duplicate descriptor composite key '%s'", fullKey)}
		}
		n := &node{children: map[string]*node{}, name: finalKey, path: fullKey,
			shadow: yd.ShadowMode, quota: yd.QuotaMode, detailed: yd.DetailedMetric,
			valueToMetric: yd.ValueToMetric, shareThreshold: yd.ShareThreshold}
		if yd.RateLimit != nil {
			l, err := c.limitOf(file, yd.RateLimit)
			if err != nil {
				return err
			}
			n.limit = l
		}
		wildcard := strings.HasSuffix(finalKey, "*")
		if yd.ShareThreshold && !wildcard {
			return &Error{file, fmt.Sprintf(
				"share_threshold can only be used with wildcard values (ending with '*'), but found key '%s'", finalKey)}
		}
		if wildcard {
			parent.wildcards = append(parent.wildcards, finalKey)
		}
		if err := c.loadDescriptors(file, n, fullKey+".", yd.Descriptors); err != nil {
			return err
		}
		parent.children[finalKey] = n
	}
	return nil
}

// limitOf validates a rate_limit block: envoyproxy/ratelimit's checks first,
// then bucketgrid's (algorithm, burst, the refill ceiling).
func (c *Config) limitOf(file string, y *config.YamlRateLimit) (*Limit, error) {
	unit, validUnit := ParseUnit(y.Unit)
	if y.Unlimited {
		if validUnit {
			return nil, &Error{file, "should not specify rate limit unit when unlimited"}
		}
		unit = UnitUnknown
	} else if !validUnit {
		return nil, &Error{file, fmt.Sprintf("invalid rate limit unit '%s'", y.Unit)}
	}
	l := &Limit{RequestsPerUnit: y.RequestsPerUnit, Unit: unit, Unlimited: y.Unlimited, Name: y.Name,
		Replaces: y.ReplacesNames(), Algorithm: c.opts.Algorithm, Burst: y.Burst}
	for _, r := range l.Replaces {
		if r == "" {
			return nil, &Error{file, "should not have an empty replaces entry"}
		}
		if r == l.Name {
			return nil, &Error{file, "replaces should not contain name of same descriptor"}
		}
	}
	if y.Algorithm != "" {
		a, ok := ParseAlgorithm(y.Algorithm)
		if !ok {
			return nil, &Error{file, fmt.Sprintf("invalid rate limit algorithm '%s' (want fixed_window or token_bucket)", y.Algorithm)}
		}
		l.Algorithm = a
	}
	if l.Burst > 0 && l.Algorithm != TokenBucket {
		return nil, &Error{file, "burst is only valid with algorithm token_bucket"}
	}
	if err := checkRefill(l); err != nil {
		return nil, &Error{file, err.Error()}
	}
	return l, nil
}

// checkRefill rejects limits too fast for a bucket to refill: above
// maxPerSecond hits per second.
func checkRefill(l *Limit) error {
	if l.Unlimited || l.Unit.Seconds() == 0 {
		return nil
	}
	if int64(l.RequestsPerUnit) > maxPerSecond*l.Unit.Seconds() {
		return fmt.Errorf("requests_per_unit %d per %s is above the %d per second bucketgrid can refill",
			l.RequestsPerUnit, strings.ToLower(l.Unit.String()), maxPerSecond)
	}
	return nil
}
