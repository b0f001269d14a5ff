package policy

import (
	"strconv"
	"strings"

	"github.com/bucketgrid/bucketgrid/internal/ruledoc"
)

// Error reports why a configuration was rejected. Its text is
// "name: reason", where name is the document's (a file name) and reason is, for every
// check envoyproxy/ratelimit makes, that service's own wording ("descriptor
// has empty key", "config error, unknown key 'ratelimit'", …), so the same
// bad file gets the same message from either service.
type Error struct {
	File   string
	Reason string
}

func (e *Error) Error() string { return e.File + ": " + e.Reason }

// Options are the service-wide settings rules are compiled with. The zero
// value is envoyproxy/ratelimit's default: domains may not be split across
// documents and every limit is a fixed window.
type Options struct {
	// MergeDomains lets several documents configure one domain, their
	// descriptors merged (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG); a key
	// configured twice is still an error. Without it a domain in two
	// documents is an error.
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
	// Unit is the time unit; UNKNOWN (0) when Unlimited.
	Unit Unit
	// Unlimited admits everything without counting.
	Unlimited bool
	// Name names the limit (for a rule's replaces, and in headers and
	// responses); empty for none.
	Name string
	// replaces are the names of limits this one switches off when both
	// apply to one request.
	replaces []string
	// Algorithm is how hits are counted.
	Algorithm Algorithm
	// Burst is the token bucket's capacity; 0 means RequestsPerUnit. Only
	// TokenBucket uses it.
	Burst uint32
}

// capacity returns the most hits the limit admits at once: Burst (or
// RequestsPerUnit) for a token bucket, RequestsPerUnit for a fixed window.
func (l *Limit) capacity() uint32 {
	if l.Algorithm == TokenBucket && l.Burst > 0 {
		return l.Burst
	}
	return l.RequestsPerUnit
}

// maxPerSecond is the largest requests_per_unit per second a bucket can
// refill: core refills at most one token per nanosecond.
const maxPerSecond = 999_999_999

// Rules is a compiled, validated configuration: the descriptor trees of
// every domain. It is immutable and safe for concurrent use.
type Rules struct {
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

// Compile validates docs as envoyproxy/ratelimit validates its files, with
// the same error for every document it rejects, and returns the rules. The
// documents come from this module's readers (package rulefile, the Envoy
// filter's configuration); elsewhere, load files with rulefile.Load. The
// first error found is returned as an *Error; nothing is partly compiled.
func Compile(docs []ruledoc.Document, opts Options) (*Rules, error) {
	c := &Rules{domains: map[string]*node{}, opts: opts}
	if c.opts.NearLimitRatio == 0 {
		c.opts.NearLimitRatio = 0.8
	}
	for i := range docs {
		if err := c.add(&docs[i]); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// HasDomain reports whether domain is configured.
func (c *Rules) HasDomain(domain string) bool { return c.domains[domain] != nil }

// Domains returns the number of domains configured.
func (c *Rules) Domains() int { return len(c.domains) }

func (c *Rules) add(doc *ruledoc.Document) error {
	if doc.Domain == "" {
		return &Error{doc.Name, "config file cannot have empty domain"}
	}
	d, ok := c.domains[doc.Domain]
	if ok && !c.opts.MergeDomains {
		return &Error{doc.Name, "duplicate domain '" + doc.Domain + "' in config file"}
	}
	if !ok {
		d = &node{children: map[string]*node{}, path: doc.Domain}
	}
	if err := c.addNodes(doc.Name, d, doc.Domain+".", doc.Descriptors); err != nil {
		return err
	}
	c.domains[doc.Domain] = d
	return nil
}

// addNodes adds descriptors under parent, whose full key is parentKey
// (ending in '.'), checking each as envoyproxy/ratelimit does and in the
// same order, so the first error reported is the same.
func (c *Rules) addNodes(file string, parent *node, parentKey string, descriptors []ruledoc.Node) error {
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
			return &Error{file, "duplicate descriptor composite key '" + fullKey + "'"}
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
			return &Error{file, "share_threshold can only be used with wildcard values (ending with '*'), but found key '" +
				finalKey + "'"}
		}
		if wildcard {
			parent.wildcards = append(parent.wildcards, finalKey)
		}
		if err := c.addNodes(file, n, fullKey+".", yd.Descriptors); err != nil {
			return err
		}
		parent.children[finalKey] = n
	}
	return nil
}

// limitOf validates a rate_limit block: envoyproxy/ratelimit's checks first,
// then bucketgrid's (algorithm, burst, the refill ceiling).
func (c *Rules) limitOf(file string, y *ruledoc.RateLimit) (*Limit, error) {
	unit, validUnit := parseUnit(y.Unit)
	if y.Unlimited {
		if validUnit {
			return nil, &Error{file, "should not specify rate limit unit when unlimited"}
		}
		unit = unitUnknown
	} else if !validUnit {
		return nil, &Error{file, "invalid rate limit unit '" + y.Unit + "'"}
	}
	l := &Limit{RequestsPerUnit: y.RequestsPerUnit, Unit: unit, Unlimited: y.Unlimited, Name: y.Name,
		replaces: y.Replaces, Algorithm: c.opts.Algorithm, Burst: y.Burst}
	for _, r := range l.replaces {
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
			return nil, &Error{file, "invalid rate limit algorithm '" + y.Algorithm + "' (want fixed_window or token_bucket)"}
		}
		l.Algorithm = a
	}
	if l.Burst > 0 && l.Algorithm != TokenBucket {
		return nil, &Error{file, "burst is only valid with algorithm token_bucket"}
	}
	if !refillable(l.RequestsPerUnit, l.Unit) {
		return nil, &Error{file, "requests_per_unit " + strconv.FormatUint(uint64(l.RequestsPerUnit), 10) + " per " +
			strings.ToLower(l.Unit.String()) + " is above the 999999999 per second bucketgrid can refill"}
	}
	return l, nil
}

// refillable reports whether a bucket can refill n hits per unit: at most
// maxPerSecond a second. Unknown units (unlimited) always can.
func refillable(n uint32, u Unit) bool {
	return u.seconds() == 0 || int64(n) <= maxPerSecond*u.seconds()
}
