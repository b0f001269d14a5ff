package wasmfilter

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/bucketgrid/bucketgrid/core"
)

// Config is the plugin configuration, the JSON document Envoy passes as the
// filter's plugin configuration. ParseConfig reads and validates it; an
// invalid document stops the plugin from starting.
//
//	{
//	  "policies": [{
//	    "name": "per-client",
//	    "match": {"path_prefix": "/api/"},
//	    "key": ["source.address"],
//	    "bandwidths": [{"capacity": 100, "refill_tokens": 100, "period": "1m"}]
//	  }],
//	  "failure_mode": "open",
//	  "headers": {"ietf": true, "x_ratelimit": true}
//	}
type Config struct {
	// Policies are checked in order; every policy whose match accepts the
	// request consumes from its bucket, and the request is rejected when any
	// of them has no tokens left. Required, at most MaxPolicies.
	Policies []PolicyConfig `json:"policies"`
	// FailureMode decides what happens when shared data fails (an error
	// status from the host, a corrupt record, no free slot): "open" (the
	// default) lets the request through, "closed" rejects it. Losing the
	// compare-and-swap race MaxAttempts times is always a rejection: contention on a key means
	// traffic on that key, and must not open the gate.
	FailureMode string `json:"failure_mode,omitempty"`
	// MaxAttempts bounds the compare-and-swap attempts of one check
	// (default 16). Retries are immediate: a proxy-wasm VM cannot sleep.
	MaxAttempts int `json:"max_attempts,omitempty"`
	// Headers selects the rate-limit headers to emit.
	Headers HeadersConfig `json:"headers"`
	// Deny shapes the rejection.
	Deny DenyConfig `json:"deny"`
	// SharedDataPrefix prefixes every shared-data key (default "bucketgrid").
	// Shared data is per vm_id: plugins sharing a VM id must use different
	// prefixes or policy names to keep their buckets apart.
	SharedDataPrefix string `json:"shared_data_prefix,omitempty"`
}

// PolicyConfig is one rate-limit policy.
type PolicyConfig struct {
	// Name identifies the policy in the IETF headers and in shared-data
	// keys: 1 to 64 characters of [A-Za-z0-9_.-].
	Name string `json:"name"`
	// Match selects the requests the policy applies to; empty matches all.
	Match MatchConfig `json:"match"`
	// Key lists the parts of the bucket key, joined in order:
	// "source.address" (the downstream peer's IP, port removed — the hop
	// Envoy itself saw, never a client-written X-Forwarded-For entry),
	// "header:<name>" (a request header; absent counts as empty), ":path",
	// ":authority", ":method" (pseudo-headers). An empty list gives one
	// bucket for the whole policy.
	Key []string `json:"key"`
	// Bandwidths are the limits of the bucket; all must allow a request.
	Bandwidths []BandwidthConfig `json:"bandwidths"`
	// Cost is the number of tokens a request takes (default 1).
	Cost int64 `json:"cost,omitempty"`
	// Slots bounds the number of buckets the policy keeps in shared data
	// (default 4096, at most MaxSlots). Shared data can never be deleted, so
	// keys hash into this many slots; see Store. The first worker to start
	// creates them all (Store.Prepare), about 10 µs per slot under wazero.
	Slots int `json:"slots,omitempty"`
	// Version is the configuration version of the policy's buckets. Raise it
	// after changing the bandwidths: stored buckets of a lower version are
	// converted to the new bandwidths, keeping their tokens proportionally.
	Version int64 `json:"version,omitempty"`
}

// MatchConfig selects requests.
type MatchConfig struct {
	// PathPrefix matches requests whose :path starts with it.
	PathPrefix string `json:"path_prefix,omitempty"`
}

// BandwidthConfig is one limit: capacity tokens, refilled by refill_tokens
// every period.
type BandwidthConfig struct {
	// ID names the bandwidth (optional; unique within the policy).
	ID string `json:"id,omitempty"`
	// Capacity is the most tokens the bucket holds: the burst.
	Capacity int64 `json:"capacity"`
	// RefillTokens are added per period (default: Capacity).
	RefillTokens int64 `json:"refill_tokens,omitempty"`
	// Period is a Go duration string such as "1s", "1m", "24h".
	Period string `json:"period"`
	// Style is "greedy" (default: tokens trickle in continuously) or
	// "intervally" (all refill tokens at once after each whole period).
	Style string `json:"style,omitempty"`
}

// HeadersConfig selects the response headers.
type HeadersConfig struct {
	// IETF emits RateLimit-Policy and RateLimit in the structured-field form
	// of draft-ietf-httpapi-ratelimit-headers (-08 and later).
	IETF bool `json:"ietf,omitempty"`
	// XRateLimit emits x-ratelimit-limit, x-ratelimit-remaining and
	// x-ratelimit-reset, as Envoy's local_ratelimit filter does.
	XRateLimit bool `json:"x_ratelimit,omitempty"`
}

// DenyConfig shapes the 429 response.
type DenyConfig struct {
	// Body is the response body (default "rate limit exceeded\n").
	Body *string `json:"body,omitempty"`
	// ContentType is the body's media type (default "text/plain").
	ContentType string `json:"content_type,omitempty"`
}

// Limits of a configuration.
const (
	MaxPolicies  = 16
	MaxSlots     = 1 << 18
	DefaultSlots = 4096
	maxNameLen   = 64
)

// ErrConfig marks every configuration error.
var ErrConfig = errors.New("wasmfilter: invalid plugin configuration")

func configErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...)
}

// policy is a compiled PolicyConfig.
type policy struct {
	name       string
	pathPrefix string
	key        []keyPart
	cost       int64
	slots      uint32
	config     core.Config
	version    int64
	// quota and window are reported in RateLimit-Policy and
	// x-ratelimit-limit: the smallest-capacity bandwidth, which bounds the
	// remaining tokens.
	quota  int64
	window int64 // seconds, at least 1
}

type keyKind uint8

const (
	keySourceAddress keyKind = iota + 1
	keyHeader
)

type keyPart struct {
	kind keyKind
	name string
}

// settings is a compiled Config.
type settings struct {
	policies    []policy
	failOpen    bool
	maxAttempts int
	headers     HeadersConfig
	body        []byte
	contentType string
	prefix      string
}

// ParseConfig reads and validates a plugin configuration. Unknown fields are
// errors, so a misspelt option is reported rather than ignored.
func ParseConfig(raw []byte) (Config, error) {
	var c Config
	if err := json.Unmarshal(raw, &c); err != nil {
		return c, configErr("%v", err)
	}
	// json.Decoder would reject unknown fields itself, but reading through an
	// io.Reader links os file reads into the .wasm, an import (fd_read) that
	// Envoy does not provide.
	var generic any
	if err := json.Unmarshal(raw, &generic); err != nil {
		return c, configErr("%v", err)
	}
	if err := unknownFields(generic, reflect.TypeFor[Config](), ""); err != nil {
		return c, err
	}
	_, err := c.compile()
	return c, err
}

// unknownFields reports the first object member of v that has no field in t
// (matched by json tag, exactly).
func unknownFields(v any, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch v := v.(type) {
	case map[string]any:
		if t.Kind() != reflect.Struct {
			return nil
		}
		for name, sub := range v {
			f, ok := fieldByTag(t, name)
			if !ok {
				return configErr("unknown field %q", strings.TrimPrefix(path+"."+name, "."))
			}
			if err := unknownFields(sub, f.Type, path+"."+name); err != nil {
				return err
			}
		}
	case []any:
		if t.Kind() != reflect.Slice {
			return nil
		}
		for i, sub := range v {
			if err := unknownFields(sub, t.Elem(), path+"["+strconv.Itoa(i)+"]"); err != nil {
				return err
			}
		}
	}
	return nil
}

func fieldByTag(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if tag == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

func (c *Config) compile() (*settings, error) {
	s := &settings{maxAttempts: 16, headers: c.Headers, contentType: "text/plain",
		body: []byte("rate limit exceeded\n"), prefix: "bucketgrid"}
	switch c.FailureMode {
	case "", "open":
		s.failOpen = true
	case "closed":
	default:
		return nil, configErr("failure_mode %q: want \"open\" or \"closed\"", c.FailureMode)
	}
	if c.MaxAttempts < 0 || c.MaxAttempts > 1000 {
		return nil, configErr("max_attempts %d: want 1..1000", c.MaxAttempts)
	}
	if c.MaxAttempts > 0 {
		s.maxAttempts = c.MaxAttempts
	}
	if c.Deny.Body != nil {
		s.body = []byte(*c.Deny.Body)
	}
	if c.Deny.ContentType != "" {
		s.contentType = c.Deny.ContentType
	}
	if c.SharedDataPrefix != "" {
		s.prefix = c.SharedDataPrefix
	}
	if len(c.Policies) == 0 {
		return nil, configErr("no policies")
	}
	if len(c.Policies) > MaxPolicies {
		return nil, configErr("%d policies: at most %d", len(c.Policies), MaxPolicies)
	}
	for i := range c.Policies {
		p, err := c.Policies[i].compile()
		if err != nil {
			return nil, fmt.Errorf("policy %d: %w", i, err)
		}
		for j := range s.policies {
			if s.policies[j].name == p.name {
				return nil, configErr("policy %d: duplicate name %q", i, p.name)
			}
		}
		s.policies = append(s.policies, p)
	}
	return s, nil
}

func validName(n string) bool {
	if n == "" || len(n) > maxNameLen {
		return false
	}
	for _, r := range n {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '.', r == '-':
		default:
			return false
		}
	}
	return true
}

func (pc *PolicyConfig) compile() (policy, error) {
	p := policy{name: pc.Name, pathPrefix: pc.Match.PathPrefix, cost: 1, slots: DefaultSlots, version: pc.Version}
	if !validName(pc.Name) {
		return p, configErr("name %q: want 1 to %d characters of [A-Za-z0-9_.-]", pc.Name, maxNameLen)
	}
	if pc.Cost < 0 {
		return p, configErr("cost %d: must be positive", pc.Cost)
	}
	if pc.Cost > 0 {
		p.cost = pc.Cost
	}
	if pc.Slots < 0 || pc.Slots > MaxSlots {
		return p, configErr("slots %d: want 1..%d", pc.Slots, MaxSlots)
	}
	if pc.Slots > 0 {
		p.slots = uint32(pc.Slots)
	}
	if pc.Version < 0 {
		return p, configErr("version %d: must not be negative", pc.Version)
	}
	if pc.Match.PathPrefix != "" && !strings.HasPrefix(pc.Match.PathPrefix, "/") {
		return p, configErr("match.path_prefix %q: must start with /", pc.Match.PathPrefix)
	}
	for _, k := range pc.Key {
		switch {
		case k == "source.address":
			p.key = append(p.key, keyPart{kind: keySourceAddress})
		case k == ":path" || k == ":authority" || k == ":method":
			p.key = append(p.key, keyPart{kind: keyHeader, name: k})
		case strings.HasPrefix(k, "header:") && len(k) > len("header:"):
			p.key = append(p.key, keyPart{kind: keyHeader, name: strings.ToLower(k[len("header:"):])})
		default:
			return p, configErr("key %q: want source.address, header:<name>, :path, :authority or :method", k)
		}
	}
	if len(pc.Bandwidths) == 0 {
		return p, configErr("no bandwidths")
	}
	bws := make([]core.Bandwidth, 0, len(pc.Bandwidths))
	for i, bc := range pc.Bandwidths {
		period, err := time.ParseDuration(bc.Period)
		if err != nil {
			return p, configErr("bandwidth %d: period: %v", i, err)
		}
		refill := bc.RefillTokens
		if refill == 0 {
			refill = bc.Capacity
		}
		var b core.Bandwidth
		switch bc.Style {
		case "", "greedy":
			b = core.Greedy(bc.Capacity, refill, period)
		case "intervally":
			b = core.Intervally(bc.Capacity, refill, period)
		default:
			return p, configErr("bandwidth %d: style %q: want greedy or intervally", i, bc.Style)
		}
		bws = append(bws, b.WithID(bc.ID))
		if i == 0 || bc.Capacity < p.quota {
			p.quota = bc.Capacity
			p.window = max(1, ceilSeconds(b.FillTime())) // as httplimit: an empty bandwidth's time to full
		}
	}
	cfg, err := core.NewConfig(bws...)
	if err != nil {
		return p, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if p.cost > p.quota {
		return p, configErr("cost %d exceeds the smallest capacity %d: every request would be rejected", p.cost, p.quota)
	}
	p.config = cfg
	return p, nil
}

// ceilSeconds rounds nanoseconds up to whole seconds.
func ceilSeconds(ns int64) int64 {
	if ns <= 0 {
		return 0
	}
	return (ns-1)/int64(time.Second) + 1
}
