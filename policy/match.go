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
	// ShadowMode reports over-limit hits but answers OK.
	ShadowMode bool
	// QuotaMode answers OK for an over-limit hit with the descriptor's status
	// kept, without making the request over the limit.
	QuotaMode bool
	// Override is set when the limit came from the request, not the file.
	Override bool
	// Path names the matched configuration node ("domain.key_value.key"),
	// wildcards as written in the file; for an override, "override:domain"
	// and the request's keys. It holds no request value: a safe, bounded
	// metric label.
	Path string
	// StatsKey is envoyproxy/ratelimit's stats key of the rule, following
	// its detailed_metric, value_to_metric and share_threshold rules. When
	// ValuesInStatsKey is set it contains request values.
	StatsKey string
	// ValuesInStatsKey reports that StatsKey holds values taken from the
	// request (detailed_metric, value_to_metric, overrides), so its
	// cardinality is the clients' to choose.
	ValuesInStatsKey bool

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
	dom := c.domains[domain]
	if dom == nil {
		return Rule{}, false
	}
	if override != nil {
		return c.overrideRule(domain, entries, override), true
	}
	var (
		r        Rule
		found    bool
		prev     = dom
		children = dom.children
		share    []string
		detailed strings.Builder // domain.key_value… of every entry visited
		valued   strings.Builder // the stats key with value_to_metric values
	)
	detailed.WriteString(domain)
	valued.WriteString(domain)
	valuesUsed := false
	for i, e := range entries {
		finalKey := e.Key + "_" + e.Value
		detailed.WriteString(".")
		detailed.WriteString(finalKey)

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

		valued.WriteString(".")
		valued.WriteString(e.Key)
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
				valued.WriteString("_")
				valued.WriteString(v)
			}
		}

		if next != nil && next.limit != nil && i == len(entries)-1 {
			r = Rule{Limit: *next.limit, ShadowMode: next.shadow, QuotaMode: next.quota,
				Path: next.path, StatsKey: next.path}
			found = true
			if next.detailed {
				r.ValuesInStatsKey = true
				r.StatsKey = detailed.String()
			}
		}
		if next == nil || len(next.children) == 0 {
			break
		}
		children, prev = next.children, next
	}
	if !found {
		return Rule{}, false
	}
	r.share = share
	switch {
	case r.ValuesInStatsKey && share != nil:
		r.StatsKey = sharedStatsKey(domain, entries, share)
	case !r.ValuesInStatsKey:
		r.StatsKey = valued.String()
		r.ValuesInStatsKey = valuesUsed
	}
	return r, true
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
	var stats, path strings.Builder
	stats.WriteString(domain)
	path.WriteString("override:")
	path.WriteString(domain)
	for _, e := range entries {
		stats.WriteString(".")
		stats.WriteString(e.Key)
		path.WriteString(".")
		path.WriteString(e.Key)
		if e.Value != "" {
			stats.WriteString("_")
			stats.WriteString(e.Value)
		}
	}
	return Rule{
		Limit:    Limit{RequestsPerUnit: o.RequestsPerUnit, Unit: o.Unit, Algorithm: c.opts.Algorithm},
		Override: true, Path: path.String(), StatsKey: stats.String(), ValuesInStatsKey: true,
	}
}
