package wasmfilter

import (
	"strings"
	"testing"
)

// TestRulesConfigErrors: a rules configuration is refused with a message
// naming the offending member, and the rule documents with the words the
// rate-limit service uses for the same file.
func TestRulesConfigErrors(t *testing.T) {
	const doc = `{"domain": "d", "descriptors": [{"key": "k", "rate_limit": {"unit": "minute", "requests_per_unit": 5}}]}`
	const limits = `[{"actions": [{"request_headers": {"header_name": "x-k", "descriptor_key": "k"}}]}]`
	ok := `{"domain": "d", "rate_limits": ` + limits + `, "rules": [` + doc + `]}`
	if _, err := ParseConfig([]byte(ok)); err != nil {
		t.Fatalf("valid configuration refused: %v", err)
	}
	for _, tc := range []struct{ config, want string }{
		{`{"domain": "d", "rate_limits": ` + limits + `, "rules": [` + doc + `], "policies": [{"name": "p"}]}`,
			`policies: the filter's own "policies" format is no longer read`},
		{`{"rate_limits": ` + limits + `, "rules": [` + doc + `]}`, "domain: missing"},
		{`{"domain": "e", "rate_limits": ` + limits + `, "rules": [` + doc + `]}`, `domain: "e": no rule document`},
		{`{"domain": "d", "rules": [` + doc + `]}`, "rate_limits: none"},
		{`{"domain": "d", "rate_limits": [{"actions": []}], "rules": [` + doc + `]}`, "rate_limits[0].actions: want 1 to 32"},
		{`{"domain": "d", "rate_limits": [{"actions": [{"source_cluster": {}}]}], "rules": [` + doc + `]}`,
			"rate_limits[0].actions[0].source_cluster: unsupported action"},
		{`{"domain": "d", "rate_limits": [{"actions": [{"remote_address": {}, "generic_key": {"descriptor_value": "v"}}]}], "rules": [` + doc + `]}`,
			"a second action in one"},
		{`{"domain": "d", "rate_limits": [{"actions": [{"request_headers": {"header_name": "x"}}]}], "rules": [` + doc + `]}`,
			"header_name and descriptor_key are required"},
		{`{"domain": "d", "rate_limits": [{"actions": [{"header_value_match": {"descriptor_value": "v", "headers": [{"name": ":path", "safe_regex_match": {}}]}}]}], "rules": [` + doc + `]}`,
			"safe_regex_match: unknown member"},
		{`{"domain": "d", "rate_limits": [{"actions": [{"header_value_match": {"descriptor_value": "v", "headers": [{"name": ":path"}]}}]}], "rules": [` + doc + `]}`,
			"want exactly one of exact_match"},
		{`{"domain": "d", "rate_limits": ` + limits + `, "rules": [{"domain": "d", "descriptors": [{"key": "k", "rate_limit": {"unit": "fortnight"}}]}]}`,
			"rules: rules[0]: invalid rate limit unit 'fortnight'"},
		{`{"domain": "d", "rate_limits": ` + limits + `, "rules": [{"domain": "d", "descriptors": [{"key": ""}]}]}`,
			"rules: rules[0]: descriptor has empty key"},
		{`{"domain": "d", "rate_limits": ` + limits + `, "rules": [{"domain": "d", "ratelimit": {}}]}`,
			"rules[0].ratelimit: unknown member"},
	} {
		_, err := ParseConfig([]byte(tc.config))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s:\n got %v\nwant …%s…", tc.config, err, tc.want)
		}
	}
}
