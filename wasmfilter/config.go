package wasmfilter

import (
	"errors"

	"github.com/bucketgrid/bucketgrid/internal/ruledoc"
	rules "github.com/bucketgrid/bucketgrid/policy"
	"strconv"
	"strings"
)

// Config is the plugin configuration, the JSON document Envoy passes as the
// filter's plugin configuration: envoyproxy/ratelimit's rule format (the
// documents cmd/bucketgrid loads, in their JSON form), the domain they are
// for, and the route's rate_limits. ParseConfig reads and validates it; an
// invalid document stops the plugin from starting.
//
//	{
//	  "domain": "edge",
//	  "rate_limits": [{"actions": [{"remote_address": {}}]}],
//	  "rules": [{"domain": "edge", "descriptors": [
//	    {"key": "remote_address", "rate_limit": {"unit": "minute", "requests_per_unit": 60}}
//	  ]}],
//	  "failure_mode": "open",
//	  "table_full": "evict_oldest",
//	  "headers": {"ietf": true, "x_ratelimit": true}
//	}
//
// The json tags name the members; ParseConfig matches them exactly (no case
// folding) and rejects unknown and repeated members. A null member counts as
// absent. The filter's former format ("policies", "path") is refused with
// an error that says what replaces each of its members.
type Config struct {
	// Domain is the domain of the rules the RateLimits describe. Required.
	Domain string `json:"domain"`
	// RateLimits build the descriptors of each request, as Envoy's
	// rate-limit actions build them: one descriptor per entry whose
	// actions all apply. 1 to policy.MaxDescriptors entries.
	RateLimits []RateLimitConfig `json:"rate_limits"`
	// Rules are the rule documents; one of them must be for Domain.
	Rules []ruledoc.Document `json:"rules"`
	// Slots bounds the buckets the filter keeps in shared data, one per
	// descriptor counted (default DefaultSlots, at most MaxSlots); see
	// Store. Set it to the number of descriptors whose buckets are not
	// full at the same time, divided by 0.9. Changing it moves every key:
	// buckets start again full, and the entries of a larger former table
	// stay in shared data until Envoy restarts.
	Slots int `json:"slots,omitempty"`
	// FailureMode decides what happens when shared data fails (an error
	// status from the host, a directory this build cannot read): "open"
	// (the default) lets the request through, "closed" rejects it. Losing
	// the compare-and-swap race MaxAttempts times is always a rejection:
	// contention on a key means traffic on that key, and must not open the
	// gate. A full slot table is not a failure: see TableFull.
	FailureMode string `json:"failure_mode,omitempty"`
	// TableFull decides what happens to a new descriptor when every slot
	// its probes reach holds a live bucket of another: "evict_oldest"
	// (the default) evicts the probed bucket closest to full (the largest
	// share of its capacity left; a spent bucket only when every probed one
	// is spent), whose client starts again from a full bucket; "reject"
	// answers 429 with Retry-After the time until a probed bucket frees its
	// slot; "allow" lets the request through unlimited. Each case is
	// counted (see Metrics).
	TableFull string `json:"table_full,omitempty"`
	// MaxAttempts bounds the compare-and-swap attempts of one check
	// (default 16). Retries are immediate: a proxy-wasm VM cannot sleep.
	MaxAttempts int `json:"max_attempts,omitempty"`
	// Headers selects the rate-limit headers to emit.
	Headers HeadersConfig `json:"headers"`
	// Deny shapes the rejection.
	Deny DenyConfig `json:"deny"`
	// SharedDataPrefix prefixes every shared-data key (default "bucketgrid").
	// Shared data is per vm_id: plugins sharing a VM id must use different
	// prefixes to keep their buckets apart.
	SharedDataPrefix string `json:"shared_data_prefix,omitempty"`
	// StatPrefix starts the name of every metric (default "bucketgrid"):
	// 1 to 64 characters of [A-Za-z0-9_].
	StatPrefix string `json:"stat_prefix,omitempty"`
	// RawPath makes the actions read :path as Envoy passes it, as Envoy's
	// own rate-limit actions do, instead of normalised (see the package
	// documentation, "Paths"). Off by default.
	RawPath bool `json:"raw_path,omitempty"`
}

// HeadersConfig selects the response headers, as package policy renders
// them for the rate-limit service.
type HeadersConfig struct {
	// IETF emits RateLimit-Policy and RateLimit in the structured-field form
	// of draft-ietf-httpapi-ratelimit-headers (-08 and later).
	IETF bool `json:"ietf,omitempty"`
	// XRateLimit emits x-ratelimit-limit, x-ratelimit-remaining and
	// x-ratelimit-reset, as Envoy's local_ratelimit filter does.
	XRateLimit bool `json:"x_ratelimit,omitempty"`
	// Draft emits ratelimit-limit, ratelimit-remaining and ratelimit-reset,
	// as envoyproxy/ratelimit does.
	Draft bool `json:"draft,omitempty"`
}

// DenyConfig shapes the 429 response.
type DenyConfig struct {
	// Body is the response body (default DefaultDenyBody).
	Body *string `json:"body,omitempty"`
	// ContentType is the body's media type (default "text/plain").
	ContentType string `json:"content_type,omitempty"`
}

// Limits and defaults of a configuration.
const (
	MaxSlots        = 1 << 18
	DefaultSlots    = 4096
	DefaultDenyBody = "rate limit exceeded\n"
	maxNameLen      = 64
	maxAttemptsCap  = 1000
)

// ErrConfig marks every configuration error; a *ConfigError matches it.
var ErrConfig = errors.New("wasmfilter: invalid plugin configuration")

// ConfigError is an invalid plugin configuration: Path locates the
// offending value ("rate_limits[0].actions[1]"; empty for the
// document as a whole) and Msg says what is wrong with it.
type ConfigError struct {
	Path string
	Msg  string
}

func (e *ConfigError) Error() string {
	if e.Path == "" {
		return ErrConfig.Error() + ": " + e.Msg
	}
	return ErrConfig.Error() + ": " + e.Path + ": " + e.Msg
}

// Is reports whether target is ErrConfig.
func (e *ConfigError) Is(target error) bool { return target == ErrConfig }

func configErr(path, msg string) error { return &ConfigError{Path: path, Msg: msg} }

// ParseConfig reads and validates a plugin configuration.
func ParseConfig(raw []byte) (Config, error) {
	c, err := decodeConfig(raw)
	if err != nil {
		return c, err
	}
	_, err = c.compile()
	return c, err
}

// tableFull is a compiled Config.TableFull.
type tableFull uint8

const (
	tableFullEvict tableFull = iota
	tableFullReject
	tableFullAllow
)

// settings is a compiled Config.
type settings struct {
	domain      string
	limits      [][]rateLimitAction
	rules       *rules.Rules
	headers     rules.Headers
	slots       uint32
	metrics     metrics
	failOpen    bool
	tableFull   tableFull
	maxAttempts int
	body        []byte
	contentType string
	prefix      string
	rawPath     bool
}

func (c *Config) compile() (*settings, error) {
	s := &settings{maxAttempts: 16, contentType: "text/plain", body: []byte(DefaultDenyBody),
		prefix: "bucketgrid", slots: DefaultSlots, rawPath: c.RawPath}
	switch c.FailureMode {
	case "", "open":
		s.failOpen = true
	case "closed":
	default:
		return nil, configErr("failure_mode", strconv.Quote(c.FailureMode)+`: want "open" or "closed"`)
	}
	switch c.TableFull {
	case "", "evict_oldest":
	case "reject":
		s.tableFull = tableFullReject
	case "allow":
		s.tableFull = tableFullAllow
	default:
		return nil, configErr("table_full", strconv.Quote(c.TableFull)+`: want "evict_oldest", "reject" or "allow"`)
	}
	if c.MaxAttempts < 0 || c.MaxAttempts > maxAttemptsCap {
		return nil, configErr("max_attempts", strconv.Itoa(c.MaxAttempts)+": want 1 to "+strconv.Itoa(maxAttemptsCap))
	}
	if c.MaxAttempts > 0 {
		s.maxAttempts = c.MaxAttempts
	}
	if c.Deny.Body != nil {
		s.body = []byte(*c.Deny.Body)
	}
	if ct := c.Deny.ContentType; ct != "" {
		if strings.ContainsAny(ct, "\r\n\x00") {
			return nil, configErr("deny.content_type", "contains a line break or NUL")
		}
		s.contentType = ct
	}
	if c.SharedDataPrefix != "" {
		s.prefix = c.SharedDataPrefix
	}
	statPrefix := "bucketgrid"
	if c.StatPrefix != "" {
		if !validName(c.StatPrefix) {
			return nil, configErr("stat_prefix", strconv.Quote(c.StatPrefix)+": want 1 to 64 characters of [A-Za-z0-9_]")
		}
		statPrefix = c.StatPrefix
	}
	if c.Slots != 0 {
		if c.Slots < 1 || c.Slots > MaxSlots {
			return nil, configErr("slots", strconv.Itoa(c.Slots)+": want 1 to "+strconv.Itoa(MaxSlots))
		}
		s.slots = uint32(c.Slots)
	}
	s.metrics = newMetrics(statPrefix, tableName)
	return s, c.compileRules(s)
}

// validName reports whether n is 1 to maxNameLen characters of
// [A-Za-z0-9_].
func validName(n string) bool {
	if n == "" || len(n) > maxNameLen {
		return false
	}
	for i := 0; i < len(n); i++ {
		switch c := n[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_':
		default:
			return false
		}
	}
	return true
}
