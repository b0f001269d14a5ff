package wasmfilter

import (
	"strconv"
	"strings"

	"github.com/bucketgrid/bucketgrid/internal/ruledoc"
	rules "github.com/bucketgrid/bucketgrid/policy"
)

// RateLimitConfig is one entry of Config.RateLimits: the actions that build
// one descriptor, as in a route's rate_limits in Envoy.
type RateLimitConfig struct {
	Actions []rateLimitAction `json:"actions"`
}

// tableName names the slot table of every bucket, in shared-data keys and
// in metric names ("<stat_prefix>.policy.rules.<event>").
const tableName = "rules"

// compileRules compiles the rules, the rate_limits and the headers of c
// into s.
func (c *Config) compileRules(s *settings) error {
	if c.Domain == "" {
		return configErr("domain", "missing: the domain of the rules the rate_limits describe")
	}
	rs, err := rules.Compile(c.Rules, rules.Options{})
	if err != nil {
		return configErr("rules", err.Error())
	}
	if !rs.HasDomain(c.Domain) {
		return configErr("domain", strconv.Quote(c.Domain)+": no rule document has this domain")
	}
	switch n := len(c.RateLimits); {
	case n == 0:
		return configErr("rate_limits", "none: want 1 to "+strconv.Itoa(rules.MaxDescriptors))
	case n > rules.MaxDescriptors:
		return configErr("rate_limits", strconv.Itoa(n)+" entries: at most "+strconv.Itoa(rules.MaxDescriptors))
	}
	s.domain, s.rules = c.Domain, rs
	for i := range c.RateLimits {
		acts := c.RateLimits[i].Actions
		at := "rate_limits[" + strconv.Itoa(i) + "].actions"
		if len(acts) == 0 || len(acts) > rules.MaxEntries {
			return configErr(at, "want 1 to "+strconv.Itoa(rules.MaxEntries)+" actions")
		}
		if err := checkPathValues(at, acts, s.rawPath); err != nil {
			return err
		}
		s.limits = append(s.limits, acts)
	}
	if c.Headers.IETF {
		s.headers |= rules.IETFHeaders
	}
	if c.Headers.XRateLimit {
		s.headers |= rules.XRateLimitHeaders
	}
	if c.Headers.Draft {
		s.headers |= rules.DraftHeaders
	}
	return nil
}

// checkPathValues refuses a path_separated_prefix that does not start
// with "/" or ends with one, and unless raw a :path matcher whose exact,
// prefix or path_separated_prefix value no normalised :path can match,
// naming the form that would. A prefix is judged as the start of a longer
// path, so "/api/." (of "/api/.well-known") stays.
func checkPathValues(at string, acts []rateLimitAction, raw bool) error {
	for i := range acts {
		for _, m := range acts[i].Headers {
			v, k := m.Value, m.Kind
			sep := k == matchPathSeparatedPrefix
			if sep && (m.Name != ":path" || v == "" || v[0] != '/' || v[len(v)-1] == '/') {
				return configErr(at, `path_separated_prefix: want a :path that starts with "/", without its final "/"`)
			}
			if raw || m.Name != ":path" || v == "" || k != matchExact && k != matchPrefix && !sep {
				continue
			}
			tail := ""
			if k == matchPrefix {
				tail = "x"
			}
			if n, ok := normalizePath(v + tail); n != v+tail {
				if !ok {
					n = "none: the filter refuses it as ambiguous"
				}
				return configErr(at, ":path "+v+" never matches a normalised :path; "+
					strings.TrimSuffix(n, tail)+" would (or set raw_path)")
			}
		}
	}
	return nil
}

// decodeRateLimit reads one rate_limits entry: {"actions": [...]}.
func decodeRateLimit(d *decoder) RateLimitConfig {
	var r RateLimitConfig
	d.object(func(d *decoder, name string) bool {
		if name != "actions" {
			return false
		}
		d.array(func(d *decoder) { r.Actions = append(r.Actions, decodeAction(d)) })
		return true
	})
	return r
}

// decodeAction reads one action: an object of exactly one of Envoy's
// action members (snake_case, as in Envoy's YAML).
func decodeAction(d *decoder) rateLimitAction {
	var a rateLimitAction
	d.object(func(d *decoder, name string) bool {
		if a.Kind != 0 {
			d.fail("a second action in one: give each its own object")
			return true
		}
		switch name {
		case "request_headers":
			a.Kind = actRequestHeaders
			d.object(func(d *decoder, name string) bool {
				switch name {
				case "header_name":
					d.str(&a.Header)
					a.Header = strings.ToLower(a.Header)
				case "descriptor_key":
					d.str(&a.Key)
				case "skip_if_absent":
					d.bool(&a.SkipIfAbsent)
				default:
					return false
				}
				return true
			})
			if a.Header == "" || a.Key == "" {
				d.fail("header_name and descriptor_key are required")
			}
		case "remote_address":
			a.Kind = actRemoteAddress
			d.object(func(*decoder, string) bool { return false })
		case "generic_key", "header_value_match":
			a.Kind, a.ExpectMatch = actGenericKey, true
			if name == "header_value_match" {
				a.Kind = actHeaderValueMatch
			}
			d.object(func(d *decoder, name string) bool {
				switch {
				case name == "descriptor_value":
					d.str(&a.Value)
				case name == "descriptor_key":
					d.str(&a.Key)
				case name == "expect_match" && a.Kind == actHeaderValueMatch:
					d.bool(&a.ExpectMatch)
				case name == "headers" && a.Kind == actHeaderValueMatch:
					d.array(func(d *decoder) { a.Headers = append(a.Headers, decodeMatcher(d)) })
				default:
					return false
				}
				return true
			})
			if a.Value == "" {
				d.fail("descriptor_value is required")
			}
			if a.Kind == actHeaderValueMatch && len(a.Headers) == 0 {
				d.fail("headers: want at least one matcher")
			}
		default:
			d.fail("unsupported action: want request_headers, remote_address, generic_key or header_value_match")
		}
		return true
	})
	if a.Kind == 0 {
		d.fail("no action")
	}
	return a
}

// decodeMatcher reads one of Envoy's header matchers.
func decodeMatcher(d *decoder) headerMatcher {
	var m headerMatcher
	kinds := 0
	set := func(k matchKind, d *decoder) {
		kinds++
		m.Kind = k
		d.str(&m.Value)
	}
	d.object(func(d *decoder, name string) bool {
		switch name {
		case "name":
			d.str(&m.Name)
			m.Name = strings.ToLower(m.Name)
		case "exact_match", "prefix_match", "suffix_match", "contains_match":
			set(stringMatch(name[:len(name)-len("_match")]), d)
		case "path_separated_prefix":
			set(matchPathSeparatedPrefix, d)
		case "present_match":
			kinds++
			m.Kind = matchPresent
			d.bool(&m.Present)
		case "string_match":
			d.object(func(d *decoder, name string) bool {
				switch k := stringMatch(name); {
				case k != 0:
					set(k, d)
				case name == "ignore_case":
					d.bool(&m.IgnoreCase)
				default:
					return false
				}
				return true
			})
		case "invert_match":
			d.bool(&m.Invert)
		case "treat_missing_header_as_empty":
			d.bool(&m.MissingAsEmpty)
		default:
			return false
		}
		return true
	})
	switch {
	case m.Name == "":
		d.fail("name is required")
	case kinds != 1:
		d.fail("want exactly one of exact_match, prefix_match, suffix_match, contains_match, present_match, string_match and path_separated_prefix (safe_regex_match and range_match are not supported)")
	}
	return m
}

// stringMatch returns the kind of one of Envoy's string matchers by the
// name StringMatcher gives it (exact, prefix, suffix, contains; the
// deprecated HeaderMatcher members add "_match"), 0 for any other name.
func stringMatch(name string) matchKind {
	switch name {
	case "exact":
		return matchExact
	case "prefix":
		return matchPrefix
	case "suffix":
		return matchSuffix
	case "contains":
		return matchContains
	}
	return 0
}

// decodeDocument reads one rule document of envoyproxy/ratelimit's format,
// the JSON form of its YAML files, with the keys its files may use.
func decodeDocument(d *decoder) ruledoc.Document {
	doc := ruledoc.Document{Name: d.path}
	d.object(func(d *decoder, name string) bool {
		switch name {
		case "domain":
			d.str(&doc.Domain)
		case "descriptors":
			doc.Descriptors = decodeNodes(d)
		default:
			return false
		}
		return true
	})
	return doc
}

func decodeNodes(d *decoder) []ruledoc.Node {
	var ns []ruledoc.Node
	d.array(func(d *decoder) {
		var n ruledoc.Node
		d.object(func(d *decoder, name string) bool {
			switch name {
			case "key":
				d.str(&n.Key)
			case "value":
				d.str(&n.Value)
			case "descriptors":
				n.Descriptors = decodeNodes(d)
			case "shadow_mode":
				d.bool(&n.ShadowMode)
			case "quota_mode":
				d.bool(&n.QuotaMode)
			case "detailed_metric":
				d.bool(&n.DetailedMetric)
			case "value_to_metric":
				d.bool(&n.ValueToMetric)
			case "share_threshold":
				d.bool(&n.ShareThreshold)
			case "rate_limit":
				if d.v.kind != jsonNull {
					n.RateLimit = decodeLimit(d)
				}
			default:
				return false
			}
			return true
		})
		ns = append(ns, n)
	})
	return ns
}

func decodeLimit(d *decoder) *ruledoc.RateLimit {
	var l ruledoc.RateLimit
	d.object(func(d *decoder, name string) bool {
		switch name {
		case "requests_per_unit", "burst":
			var n int64
			d.int64(&n)
			if n < 0 || n > 1<<32-1 {
				d.fail(strconv.FormatInt(n, 10) + ": want 0 to 4294967295")
			}
			if name == "burst" {
				l.Burst = uint32(n)
			} else {
				l.RequestsPerUnit = uint32(n)
			}
		case "unit":
			d.str(&l.Unit)
		case "unlimited":
			d.bool(&l.Unlimited)
		case "name":
			d.str(&l.Name)
		case "algorithm":
			d.str(&l.Algorithm)
		case "replaces":
			d.array(func(d *decoder) {
				var r string
				d.object(func(d *decoder, name string) bool {
					if name != "name" {
						return false
					}
					d.str(&r)
					return true
				})
				l.Replaces = append(l.Replaces, r)
			})
		default:
			return false
		}
		return true
	})
	return &l
}
