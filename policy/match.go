package policy

import "strings"

// Entry is one key/value pair of a request descriptor.
type Entry struct {
	Key, Value string
}

// Override is Envoy's per-descriptor limit override (set by the route's
// dynamic metadata). It replaces whatever the configuration says.
type Override struct {
	RequestsPerUnit uint32
	Unit            Unit
}

// Rule is the limit that applies to one request descriptor: the configured
// limit of the descriptor tree node it matched (or Envoy's override) with
// that node's flags, and the names under which it is counted.
type Rule struct {
	Limit
	// ShadowMode reports over-limit hits but answers codeOK.
	ShadowMode bool
	// QuotaMode answers codeOK for an over-limit hit with the descriptor's status
	// kept, without making the request over the limit.
	QuotaMode bool
	// override is set when the limit came from the request, not the file.
	override bool
	// Path names the matched configuration node ("domain.key_value.key"),
	// wildcards as written in the file; for an override, "override:domain"
	// and the request's keys. It holds no request value: a safe, bounded
	// metric label.
	Path string
	// share[i], when not empty, replaces entry i's value in the bucket key
	// (share_threshold: every value matching the wildcard shares a bucket).
	share []string
}

// Match returns the rule of descriptor entries in domain, and false when
// none applies: the domain is unknown, no node matches, or the matched node
// is not at the descriptor's depth or has no limit. With an override the
// override applies (in a known domain) whatever the tree says.
//
// Matching is envoyproxy/ratelimit's: at each level the entry's key and
// value first, then the level's wildcard values (a trailing '*', in file
// order, the first prefix match wins), then the key alone; a limit applies
// only at the node of the descriptor's last entry.
func (c *Rules) Match(domain string, entries []Entry, override *Override) (Rule, bool) {
	return c.match(domain, entries, override)
}

func (c *Rules) match(domain string, entries []Entry, override *Override) (Rule, bool) {
	dom := c.domains[domain]
	if dom == nil {
		return Rule{}, false
	}
	if override != nil {
		return c.overrideRule(domain, entries, override), true
	}
	n, share := walk(dom, entries, nil)
	if n == nil {
		return Rule{}, false
	}
	return Rule{Limit: *n.limit, ShadowMode: n.shadow, QuotaMode: n.quota, Path: n.path, share: share}, true
}

// walk follows entries down the tree from dom and returns the node whose
// limit applies (nil for none) and the share_threshold patterns. visit,
// when not nil, sees every entry with the node it matched (nil for none),
// the wildcard that matched it and whether its value did.
func walk(dom *node, entries []Entry, visit func(i int, next *node, wildcard string, byValue bool, share []string)) (*node, []string) {
	var (
		found    *node
		prev     = dom
		children = dom.children
		share    []string
	)
	for i, e := range entries {
		finalKey := e.Key + "_" + e.Value
		next := children[finalKey]
		wildcard := ""
		if next == nil {
			for _, w := range prev.wildcards {
				if strings.HasPrefix(finalKey, strings.TrimSuffix(w, "*")) {
					next, wildcard = children[w], w
					break
				}
			}
		}
		byValue := next != nil
		if next == nil {
			next = children[e.Key]
		}
		if wildcard != "" && next.shareThreshold {
			if share == nil {
				share = make([]string, len(entries))
			}
			share[i] = strings.TrimPrefix(next.name, e.Key+"_")
		}
		if visit != nil {
			visit(i, next, wildcard, byValue, share)
		}
		if next != nil && next.limit != nil && i == len(entries)-1 {
			found = next
		}
		if next == nil || len(next.children) == 0 {
			break
		}
		children, prev = next.children, next
	}
	return found, share
}

// StatsKey returns envoyproxy/ratelimit's stats key of r, the rule Plan
// (or Match) found for entries of domain, following its detailed_metric,
// value_to_metric and share_threshold rules, and whether the key holds
// values taken from the request (detailed_metric, value_to_metric,
// overrides), so that its cardinality is the clients' to choose. Plan leaves
// it to the door, as only metrics need it.
func (c *Rules) StatsKey(domain string, entries []Entry, r *Rule) (key string, values bool) {
	if r.override {
		return overrideStatsKey(domain, entries), true
	}
	dom := c.domains[domain]
	if dom == nil {
		return
	}
	// Both keys are built on the stack and only the one returned is
	// copied into a string: an allocation per counted descriptor.
	var dbuf, vbuf [128]byte
	detailed := append(dbuf[:0], domain...) // domain.key_value… of every entry visited
	valued := append(vbuf[:0], domain...)   // the stats key with value_to_metric values
	isDetail := false
	valuesUsed := false
	n, share := walk(dom, entries, func(i int, next *node, wildcard string, byValue bool, share []string) {
		e := entries[i]
		detailed = append(detailed, '.')
		detailed = append(detailed, e.Key...)
		detailed = append(detailed, '_')
		detailed = append(detailed, e.Value...)
		valued = append(valued, '.')
		valued = append(valued, e.Key...)
		if next != nil {
			v := ""
			switch {
			case wildcard != "" && share != nil && share[i] != "":
				v = share[i]
			case wildcard != "" && next.valueToMetric:
				v, valuesUsed = e.Value, true
			case wildcard != "":
				v = strings.TrimPrefix(wildcard, e.Key+"_")
			case byValue:
				v = e.Value
			case next.valueToMetric:
				v, valuesUsed = e.Value, true
			}
			if v != "" {
				valued = append(valued, '_')
				valued = append(valued, v...)
			}
		}
		if next != nil && next.limit != nil && i == len(entries)-1 && next.detailed {
			isDetail = true
		}
	})
	if n == nil {
		return
	}
	switch {
	case isDetail && share != nil:
		return sharedStatsKey(domain, entries, share), true
	case isDetail:
		return string(detailed), true
	default:
		return string(valued), valuesUsed
	}
}

// sharedStatsKey is the detailed stats key of a rule with share_threshold:
// the wildcard pattern in place of each shared value.
func sharedStatsKey(domain string, entries []Entry, share []string) string {
	var b strings.Builder
	b.WriteString(domain)
	for i, e := range entries {
		b.WriteString(".")
		b.WriteString(e.Key)
		switch {
		case share[i] != "":
			b.WriteString("_")
			b.WriteString(share[i])
		case e.Value != "":
			b.WriteString("_")
			b.WriteString(e.Value)
		}
	}
	return b.String()
}

// overrideRule is the rule of Envoy's limit override: the service's default
// algorithm, no shadow mode, counted under the descriptor's own key.
func (c *Rules) overrideRule(domain string, entries []Entry, o *Override) Rule {
	path := "override:" + domain
	for _, e := range entries {
		path += "." + e.Key
	}
	return Rule{Limit: Limit{RequestsPerUnit: o.RequestsPerUnit, Unit: o.Unit, Algorithm: c.opts.Algorithm},
		override: true, Path: path}
}

// overrideStatsKey is the stats key of an override: the descriptor's keys
// and values.
func overrideStatsKey(domain string, entries []Entry) string {
	var stats strings.Builder
	stats.WriteString(domain)
	for _, e := range entries {
		stats.WriteString(".")
		stats.WriteString(e.Key)
		if e.Value != "" {
			stats.WriteString("_")
			stats.WriteString(e.Value)
		}
	}
	return stats.String()
}
