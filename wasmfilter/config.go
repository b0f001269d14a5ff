package wasmfilter

import (
	"errors"

	rules "github.com/bucketgrid/bucketgrid/policy"
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
//	  "table_full": "evict_oldest",
//	  "headers": {"ietf": true, "x_ratelimit": true}
//	}
//
// The json tags name the members; ParseConfig matches them exactly (no case
// folding) and rejects unknown and repeated members. A null member counts as
// absent.
type Config struct {
	// Policies are checked in order; every policy whose match accepts the
	// request consumes from its bucket, and the request is rejected when any
	// of them has no tokens left. Required, at most MaxPolicies.
	Policies []PolicyConfig `json:"policies"`
	// Domain, RateLimits and Rules are the alternative to Policies:
	// envoyproxy/ratelimit's rule format, the documents (Rules, the JSON
	// form of its YAML files) that cmd/bucketgrid loads, applied to the
	// descriptors that RateLimits build from each request as Envoy's
	// rate-limit actions build them, in Domain. See the package
	// documentation.
	Domain     string            `json:"domain,omitempty"`
	RateLimits []RateLimitConfig `json:"rate_limits,omitempty"`
	Rules      []rules.Document  `json:"rules,omitempty"`
	// Slots bounds the buckets of the rules mode (default DefaultSlots, at
	// most MaxSlots); see PolicyConfig.Slots.
	Slots int `json:"slots,omitempty"`
	// FailureMode decides what happens when shared data fails (an error
	// status from the host, a directory this build cannot read): "open"
	// (the default) lets the request through, "closed" rejects it. Losing
	// the compare-and-swap race MaxAttempts times is always a rejection:
	// contention on a key means traffic on that key, and must not open the
	// gate. A full slot table is not a failure: see TableFull.
	FailureMode string `json:"failure_mode,omitempty"`
	// TableFull decides what happens to a new client when every slot its
	// probes reach holds a live bucket of another client: "evict_oldest"
	// (the default) evicts the probed bucket closest to full (the largest
	// share of capacity in its emptiest bandwidth; a spent bucket only when
	// every probed one is spent), whose client starts again from a full
	// bucket; "reject" answers 429 with Retry-After
	// the time until a probed bucket frees its slot; "allow" lets the
	// request through unlimited. Each case is counted (see Metrics).
	TableFull string `json:"table_full,omitempty"`
	// MaxAttempts bounds the compare-and-swap attempts of one check
	// (default 16). Retries are immediate: a proxy-wasm VM cannot sleep.
	MaxAttempts int `json:"max_attempts,omitempty"`
	// Headers selects the rate-limit headers to emit.
	Headers HeadersConfig `json:"headers"`
	// Deny shapes the rejection.
	Deny DenyConfig `json:"deny"`
	// Path says how :path is read for matching and for the ":path" key.
	Path PathConfig `json:"path"`
	// SharedDataPrefix prefixes every shared-data key (default "bucketgrid").
	// Shared data is per vm_id: plugins sharing a VM id must use different
	// prefixes or policy names to keep their buckets apart.
	SharedDataPrefix string `json:"shared_data_prefix,omitempty"`
	// StatPrefix starts the name of every metric (default "bucketgrid"):
	// 1 to 64 characters of [A-Za-z0-9_].
	StatPrefix string `json:"stat_prefix,omitempty"`
}

// PolicyConfig is one rate-limit policy.
type PolicyConfig struct {
	// Name identifies the policy in the IETF headers, in shared-data keys
	// and in metric names: 1 to 64 characters of [A-Za-z0-9_.-].
	Name string `json:"name"`
	// Match selects the requests the policy applies to; empty matches all.
	Match MatchConfig `json:"match"`
	// Key lists the parts of the bucket key, joined in order:
	// "source.address" (the downstream peer's IP, port removed — the hop
	// Envoy itself saw, never a client-written X-Forwarded-For entry),
	// "header:<name>" (a request header; absent counts as empty), ":path"
	// (read as Path says), ":authority", ":method" (pseudo-headers). An
	// empty list gives one bucket for the whole policy. A key longer than
	// MaxKeyLen bytes, or not valid UTF-8, is replaced by its SHA-256 digest
	// in a namespace no literal key can reach.
	Key []string `json:"key"`
	// Bandwidths are the limits of the bucket; all must allow a request.
	Bandwidths []BandwidthConfig `json:"bandwidths"`
	// Cost is the number of tokens a request takes (default 1, at most the
	// smallest capacity).
	Cost int64 `json:"cost,omitempty"`
	// Slots bounds the number of buckets the policy keeps in shared data
	// (default DefaultSlots, at most MaxSlots); see Store. Set it to the
	// number of clients whose buckets are not full at the same time,
	// divided by 0.9. Changing it moves every key: buckets start again full,
	// and the entries of a larger former table stay in shared data until
	// Envoy restarts.
	Slots int `json:"slots,omitempty"`
	// Version is the configuration version of the policy's buckets. Raise it
	// after changing the bandwidths: stored buckets of a lower version are
	// converted to the new bandwidths, keeping their tokens proportionally.
	Version int64 `json:"version,omitempty"`
}

// MatchConfig selects requests.
type MatchConfig struct {
	// PathPrefix matches requests whose path (read as Config.Path says)
	// starts with it. It must start with "/".
	PathPrefix string `json:"path_prefix,omitempty"`
}

// PathConfig says how the filter reads :path.
type PathConfig struct {
	// Normalize (default true) matches and keys on the normalised path:
	// query cut off, escapes of unreserved characters decoded, path
	// parameters (";" to the end of a segment) cut off, "//" collapsed, "."
	// and ".." resolved. false uses the raw :path, query included.
	Normalize *bool `json:"normalize,omitempty"`
	// IgnoreCase lower-cases the path (and the prefixes) before matching and
	// keying, for upstreams that treat /API and /api alike.
	IgnoreCase bool `json:"ignore_case,omitempty"`
}

// BandwidthConfig is one limit: capacity tokens, refilled by refill_tokens
// every period.
type BandwidthConfig struct {
	// ID names the bandwidth in the IETF headers (optional; unique within
	// the policy; characters of [A-Za-z0-9_.-]).
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
	// Draft emits ratelimit-limit, ratelimit-remaining and ratelimit-reset
	// (rules mode only), as envoyproxy/ratelimit does.
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
	MaxPolicies     = 16
	MaxSlots        = 1 << 18
	DefaultSlots    = 4096
	DefaultDenyBody = "rate limit exceeded\n"
	maxNameLen      = 64
	maxAttemptsCap  = 1000
	// maxSFInteger is the largest integer an RFC 9651 structured field
	// holds (15 digits).
	maxSFInteger = 999_999_999_999_999
)

// ErrConfig marks every configuration error; a *ConfigError matches it.
var ErrConfig = errors.New("wasmfilter: invalid plugin configuration")

// ConfigError is an invalid plugin configuration: Path locates the
// offending value ("policies[0].bandwidths[1].period"; empty for the
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
	policies    []policy
	rules       *rulesMode // the rules mode, with one policy: its slot table
	failOpen    bool
	tableFull   tableFull
	maxAttempts int
	headers     HeadersConfig
	body        []byte
	contentType string
	prefix      string
	statPrefix  string
	normalize   bool
	foldCase    bool
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
	// bands describe the bandwidths in the headers, in requests of cost
	// tokens; items is the policy's part of RateLimit-Policy.
	bands   []bandInfo
	items   string
	metrics metrics
}

// bandInfo is one bandwidth as the headers describe it.
type bandInfo struct {
	item string // the structured-field string naming it, quoted
	q    int64  // capacity in requests: capacity / cost
	w    int64  // seconds to fill from empty, at least 1
}

type keyKind uint8

const (
	keySourceAddress keyKind = iota + 1
	keyHeader
	keyPath
)

type keyPart struct {
	kind keyKind
	name string
}

func (c *Config) compile() (*settings, error) {
	s := &settings{maxAttempts: 16, headers: c.Headers, contentType: "text/plain",
		body: []byte(DefaultDenyBody), prefix: "bucketgrid", statPrefix: "bucketgrid", normalize: true,
		foldCase: c.Path.IgnoreCase}
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
	if c.StatPrefix != "" {
		if !validName(c.StatPrefix, false) {
			return nil, configErr("stat_prefix", strconv.Quote(c.StatPrefix)+": want 1 to 64 characters of [A-Za-z0-9_]")
		}
		s.statPrefix = c.StatPrefix
	}
	if c.Path.Normalize != nil {
		s.normalize = *c.Path.Normalize
	}
	if c.Domain != "" || c.Rules != nil || c.RateLimits != nil {
		return s, c.compileRules(s)
	}
	switch n := len(c.Policies); {
	case n == 0:
		return nil, configErr("policies", "none: want 1 to "+strconv.Itoa(MaxPolicies))
	case n > MaxPolicies:
		return nil, configErr("policies", strconv.Itoa(n)+" policies: at most "+strconv.Itoa(MaxPolicies))
	}
	for i := range c.Policies {
		at := "policies[" + strconv.Itoa(i) + "]"
		p, err := c.Policies[i].compile(at, s)
		if err != nil {
			return nil, err
		}
		for j := range s.policies {
			if s.policies[j].metrics.collides(&p.metrics) {
				why := ": also the name of policies["
				if s.policies[j].name != p.name {
					why = ": '.' becomes '_' in metric names: the name of policies["
				}
				return nil, configErr(at+".name", strconv.Quote(p.name)+why+strconv.Itoa(j)+"]")
			}
		}
		s.policies = append(s.policies, p)
	}
	return s, nil
}

// validName reports whether n is 1 to maxNameLen characters of
// [A-Za-z0-9_] (and of ".-" when punct).
func validName(n string, punct bool) bool {
	if n == "" || len(n) > maxNameLen {
		return false
	}
	for i := 0; i < len(n); i++ {
		switch c := n[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_':
		case punct && (c == '.' || c == '-'):
		default:
			return false
		}
	}
	return true
}

func (pc *PolicyConfig) compile(at string, s *settings) (policy, error) {
	p := policy{name: pc.Name, cost: 1, slots: DefaultSlots, version: pc.Version}
	if !validName(pc.Name, true) {
		return p, configErr(at+".name", strconv.Quote(pc.Name)+": want 1 to 64 characters of [A-Za-z0-9_.-]")
	}
	if pc.Cost < 0 {
		return p, configErr(at+".cost", strconv.FormatInt(pc.Cost, 10)+": must be positive")
	}
	if pc.Cost > 0 {
		p.cost = pc.Cost
	}
	if pc.Slots < 0 || pc.Slots > MaxSlots {
		return p, configErr(at+".slots", strconv.Itoa(pc.Slots)+": want 1 to "+strconv.Itoa(MaxSlots))
	}
	if pc.Slots > 0 {
		p.slots = uint32(pc.Slots)
	}
	if pc.Version < 0 {
		return p, configErr(at+".version", strconv.FormatInt(pc.Version, 10)+": must not be negative")
	}
	if pp := pc.Match.PathPrefix; pp != "" {
		if !strings.HasPrefix(pp, "/") {
			return p, configErr(at+".match.path_prefix", strconv.Quote(pp)+": must start with /")
		}
		if s.normalize {
			pp = normalizePath(pp, s.foldCase)
		} else if s.foldCase {
			pp = strings.ToLower(pp)
		}
		p.pathPrefix = pp
	}
	for k, part := range pc.Key {
		switch {
		case part == "source.address":
			p.key = append(p.key, keyPart{kind: keySourceAddress})
		case part == ":path":
			p.key = append(p.key, keyPart{kind: keyPath})
		case part == ":authority" || part == ":method":
			p.key = append(p.key, keyPart{kind: keyHeader, name: part})
		case strings.HasPrefix(part, "header:") && len(part) > len("header:"):
			p.key = append(p.key, keyPart{kind: keyHeader, name: strings.ToLower(part[len("header:"):])})
		default:
			return p, configErr(at+".key["+strconv.Itoa(k)+"]",
				strconv.Quote(part)+": want source.address, header:<name>, :path, :authority or :method")
		}
	}
	if err := p.compileBandwidths(at, pc.Bandwidths, s.headers.IETF); err != nil {
		return p, err
	}
	p.metrics = newMetrics(s.statPrefix, p.name)
	return p, nil
}

func (p *policy) compileBandwidths(at string, bcs []BandwidthConfig, ietf bool) error {
	if len(bcs) == 0 {
		return configErr(at+".bandwidths", "none: want at least one")
	}
	bws := make([]core.Bandwidth, 0, len(bcs))
	smallest := int64(-1)
	for i, bc := range bcs {
		bat := at + ".bandwidths[" + strconv.Itoa(i) + "]"
		period, err := time.ParseDuration(bc.Period)
		if err != nil {
			return configErr(bat+".period", strconv.Quote(bc.Period)+": want a duration such as \"1s\", \"1m\" or \"24h\"")
		}
		if bc.ID != "" && !validName(bc.ID, true) {
			return configErr(bat+".id", strconv.Quote(bc.ID)+": want 1 to 64 characters of [A-Za-z0-9_.-]")
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
			return configErr(bat+".style", strconv.Quote(bc.Style)+": want \"greedy\" or \"intervally\"")
		}
		bws = append(bws, b.WithID(bc.ID))
		if smallest < 0 || bc.Capacity < smallest {
			smallest = bc.Capacity
		}
	}
	cfg, err := core.NewConfig(bws...)
	if err != nil {
		ce, ok := as[*core.ConfigError](err)
		if ok && ce.Bandwidth >= 0 {
			return configErr(at+".bandwidths["+strconv.Itoa(ce.Bandwidth)+"]", ce.Err.Error())
		}
		if ce != nil {
			err = ce.Err
		}
		return configErr(at+".bandwidths", err.Error())
	}
	if p.cost > smallest {
		return configErr(at+".cost", strconv.FormatInt(p.cost, 10)+" exceeds the smallest capacity "+
			strconv.FormatInt(smallest, 10)+": every request would be rejected")
	}
	p.config = cfg
	p.bands = make([]bandInfo, len(bws))
	var items strings.Builder
	for i := range bws {
		b := &p.bands[i]
		b.q = bws[i].Capacity / p.cost
		if ietf && b.q > maxSFInteger {
			return configErr(at+".bandwidths["+strconv.Itoa(i)+"].capacity", strconv.FormatInt(bws[i].Capacity, 10)+
				": "+strconv.FormatInt(b.q, 10)+" requests is more than the 15 digits a RateLimit-Policy integer can carry")
		}
		b.w = max(1, ceilSeconds(bws[i].FillTime()))
		name := p.name
		if len(bws) > 1 {
			id := bws[i].ID
			if id == "" {
				id = strconv.Itoa(i)
			}
			name += "/" + id
		}
		b.item = `"` + name + `"` // names and ids need no escaping
		if i > 0 {
			items.WriteString(", ")
		}
		items.WriteString(b.item + ";q=" + strconv.FormatInt(b.q, 10) + ";w=" + strconv.FormatInt(b.w, 10))
	}
	p.items = items.String()
	return nil
}

// ceilSeconds rounds nanoseconds up to whole seconds.
func ceilSeconds(ns int64) int64 {
	if ns <= 0 {
		return 0
	}
	return (ns-1)/int64(time.Second) + 1
}
