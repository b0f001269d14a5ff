package wasmfilter

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// referenceParse is the reader this package used before it had its own:
// encoding/json, plus a reflective walk that rejects members no field is
// tagged with (matched exactly). The JSON reader must agree with it on every
// document both accept, and accept every document it accepts except those
// the reader rejects on purpose (repeated members, invalid UTF-8).
func referenceParse(raw []byte) (Config, error) {
	var c Config
	if err := json.Unmarshal(raw, &c); err != nil {
		return c, err
	}
	var generic any
	if err := json.Unmarshal(raw, &generic); err != nil {
		return c, err
	}
	return c, unknownMembers(generic, reflect.TypeFor[Config]())
}

func unknownMembers(v any, t reflect.Type) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch v := v.(type) {
	case map[string]any:
		if t.Kind() != reflect.Struct {
			return nil
		}
		for name, sub := range v {
			var field *reflect.StructField
			for i := range t.NumField() {
				f := t.Field(i)
				if tag, _, _ := strings.Cut(f.Tag.Get("json"), ","); tag == name {
					field = &f
				}
			}
			if field == nil {
				return errors.New("unknown member " + name)
			}
			if err := unknownMembers(sub, field.Type); err != nil {
				return err
			}
		}
	case []any:
		if t.Kind() == reflect.Slice {
			for _, sub := range v {
				if err := unknownMembers(sub, t.Elem()); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// repeatedMember reports whether some object of the document repeats a
// member name (after unescaping), which encoding/json accepts (last wins)
// and decodeConfig refuses.
func repeatedMember(raw []byte) bool {
	v, err := parseJSON(raw)
	if err != nil {
		return false
	}
	var walk func(v jsonValue) bool
	walk = func(v jsonValue) bool {
		seen := map[string]bool{}
		for _, m := range v.members {
			if seen[m.name] || walk(m.value) {
				return true
			}
			seen[m.name] = true
		}
		for _, it := range v.items {
			if walk(it) {
				return true
			}
		}
		return false
	}
	return walk(v)
}

// configSeeds hold no rule documents: decodeDocument records each
// document's path as its name, which encoding/json cannot.
var configSeeds = []string{
	`{"domain": "d", "slots": 8, "failure_mode": "closed", "table_full": "reject", "max_attempts": 3,
	  "headers": {"ietf": false, "x_ratelimit": true, "draft": true},
	  "deny": {"body": null, "content_type": "application/json"}, "shared_data_prefix": "x", "stat_prefix": "y"}`,
	`{"domain": null, "slots": null, "headers": null}`,
	`{"deny": {"body": "\u00e9\ud83d\ude00\n\"\\\/\b\f\r\t"}, "rate_limits": []}`,
	`{"slots": 1e3}`,
	`{"slots": 1.0}`,
	`{"slots": -0}`,
	`{"slots": 99999999999999999999}`,
	`{"slots": "1"}`,
	`{"domain": "a", "domain": "b"}`,
	`{"Domain": "a"}`,
	`{"rules": [], }`,
	`[1, 2]`,
	` {"rules":[]} `,
	`{"domain": "\ud800"}`,
	"{\"deny\": {\"body\": \"\xff\"}}",
	`{"a": {"b": {"c": {"d": {}}}}}`,
	`{"max_attempts": 01}`,
	`{"max_attempts": -}`,
	`{"headers": {"ietf": 1}}`,
	`{"policies": []}`,
	`"x"`,
	`nul`,
	``,
}

// FuzzConfigAgreesWithEncodingJSON is the differential test of the JSON
// reader against encoding/json.
func FuzzConfigAgreesWithEncodingJSON(f *testing.F) {
	for _, s := range configSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, err := decodeConfig(raw)
		want, refErr := referenceParse(raw)
		switch {
		case err == nil && refErr != nil:
			t.Fatalf("accepted what encoding/json refuses (%v): %q", refErr, raw)
		case err == nil && !reflect.DeepEqual(got, want):
			t.Fatalf("decoded %q\n as  %+v\nwant %+v", raw, got, want)
		case err != nil && refErr == nil && utf8.Valid(raw) && !repeatedMember(raw):
			t.Fatalf("refused what encoding/json accepts: %v: %q", err, raw)
		case err != nil && !errors.Is(err, ErrConfig):
			t.Fatalf("error %v is not an ErrConfig", err)
		}
	})
}

func TestConfigSeedsAgreeWithEncodingJSON(t *testing.T) {
	// The seeds run in every plain go test as well; this names the cases
	// where the two must differ, so that a change there is noticed.
	for _, s := range []string{`{"domain": "a", "domain": "b"}`, "{\"deny\": {\"body\": \"\xff\"}}"} {
		if _, err := referenceParse([]byte(s)); err != nil {
			t.Errorf("encoding/json refuses %q: %v", s, err)
		}
		if _, err := decodeConfig([]byte(s)); err == nil {
			t.Errorf("accepted %q", s)
		}
	}
}

// ruleBase is the members of a valid configuration, for the cases that
// break one other member.
const ruleBase = `"domain": "d", "rate_limits": [{"actions": [{"remote_address": {}}]}],
  "rules": [{"domain": "d", "descriptors": [{"key": "remote_address", "rate_limit": {"unit": "second", "requests_per_unit": 10}}]}]`

// TestConfigErrors pins the message of every kind of configuration error:
// one prefix, the member's path, what is wrong.
func TestConfigErrors(t *testing.T) {
	for _, c := range []struct{ doc, want string }{
		{``, `JSON syntax error at byte 0: empty document`},
		{`{`, `JSON syntax error at byte 1: unexpected end of document, want a member name`},
		{`{"rules": [}`, `JSON syntax error at byte 11: unexpected '}', want a value`},
		{`{"rules": []} x`, `JSON syntax error at byte 14: unexpected 'x' after the document`},
		{"{\"a\": \"\x01\"}", `JSON syntax error at byte 7: control character byte 0x1 in a string`},
		{"{\"a\": \"\xff\"}", `JSON syntax error at byte 7: invalid UTF-8 in a string`},
		{`{"a": "\q"}`, `JSON syntax error at byte 7: invalid escape \q`},
		{`{"a": 1.}`, `JSON syntax error at byte 8: unexpected '}' in a number`},
		{strings.Repeat("[", 40), `JSON syntax error at byte 33: nested more than 32 levels`},
		{`[]`, `want an object, got an array`},
		{`{"rules": {}}`, `rules: want an array, got an object`},
		{`{"domain": "d", "domain": "d"}`, `domain: repeated member`},
		{`{"domian": "d"}`, `domian: unknown member`},
		{`{` + ruleBase + `, "slots": 1.5}`, `slots: 1.5: want an integer`},
		{`{` + ruleBase + `, "max_attempts": 1e2}`, `max_attempts: 1e2: want an integer`},
		{`{` + ruleBase + `, "slots": 9223372036854775808}`, `slots: 9223372036854775808: out of the range of a 64-bit integer`},
		{`{"domain": 1}`, `domain: want a string, got a number`},
		{`{"failure_mode": "maybe", ` + ruleBase + `}`, `failure_mode: "maybe": want "open" or "closed"`},
		{`{"table_full": "drop", ` + ruleBase + `}`, `table_full: "drop": want "evict_oldest", "reject" or "allow"`},
		{`{"max_attempts": 1001, ` + ruleBase + `}`, `max_attempts: 1001: want 1 to 1000`},
		{`{"stat_prefix": "a.b", ` + ruleBase + `}`, `stat_prefix: "a.b": want 1 to 64 characters of [A-Za-z0-9_]`},
		{`{"deny": {"content_type": "text/plain\r\nx: y"}, ` + ruleBase + `}`, `deny.content_type: contains a line break or NUL`},
		{`{"slots": 300000, ` + ruleBase + `}`, `slots: 300000: want 1 to 262144`},
		{`{"slots": -1, ` + ruleBase + `}`, `slots: -1: want 1 to 262144`},
	} {
		_, err := ParseConfig([]byte(c.doc))
		if err == nil {
			t.Errorf("%s: accepted", c.doc)
			continue
		}
		want := "wasmfilter: invalid plugin configuration: " + c.want
		if err.Error() != want || !errors.Is(err, ErrConfig) {
			t.Errorf("%s:\n got %v\nwant %s", c.doc, err, want)
		}
		if n := strings.Count(err.Error(), "invalid"); n > 1 && !strings.Contains(c.want, "invalid") {
			t.Errorf("%s: prefix repeated: %v", c.doc, err)
		}
	}
}

// TestFormerFormatSaysHowToMigrate: a configuration of the filter's former
// format — policies, path, alone or beside valid rules — is refused before
// anything is prepared, with the member named and the rule-format members
// that replace each of its own.
func TestFormerFormatSaysHowToMigrate(t *testing.T) {
	const policies = `"policies": [{"name": "per-client", "match": {"path_prefix": "/api/"}, "key": ["source.address"],
	  "bandwidths": [{"capacity": 10, "period": "1m"}]}]`
	for _, c := range []struct {
		doc, member string
		says        []string
	}{
		{`{` + policies + `}`, "policies", []string{"remote_address", "request_headers", "header_value_match", "prefix_match",
			"requests_per_unit", "token_bucket", "burst", "generic_key", "slots", "cost", "refund"}},
		{`{` + ruleBase + `, ` + policies + `}`, "policies", []string{"rate_limits", "rules"}},
		{`{"policies": []}`, "policies", []string{"domain, rate_limits and rules"}},
		{`{"path": {"normalize": true, "ignore_case": true}, ` + ruleBase + `}`, "path",
			[]string{"normalises :path", "raw_path", "';'", "path_separated_prefix", "ignore_case"}},
	} {
		env := newFakeEnvoy()
		h := newFakeHost(env.shared, env.clock, c.doc)
		vm := NewVM(h)
		vm.OnContextCreate(1, 0)
		if vm.OnConfigure(1, len(c.doc)) {
			t.Errorf("%s: configured", c.doc)
			continue
		}
		msg := strings.Join(h.logs, "\n")
		if !strings.Contains(msg, "wasmfilter: invalid plugin configuration: "+c.member+": ") {
			t.Errorf("%s: the error does not name %s: %s", c.doc, c.member, msg)
		}
		for _, s := range c.says {
			if !strings.Contains(msg, s) {
				t.Errorf("%s: the error does not say %q: %s", c.doc, s, msg)
			}
		}
		if n := env.shared.Len(); n != 0 {
			t.Errorf("%s: %d shared-data entries written before the refusal", c.doc, n)
		}
	}
}

func TestParseConfigDefaults(t *testing.T) {
	c, err := ParseConfig([]byte(`{` + ruleBase + `}`))
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.compile()
	if err != nil {
		t.Fatal(err)
	}
	if !s.failOpen || s.tableFull != tableFullEvict || s.maxAttempts != 16 || !bytes.Equal(s.body, []byte("rate limit exceeded\n")) ||
		s.contentType != "text/plain" || s.prefix != "bucketgrid" || s.slots != DefaultSlots ||
		s.metrics.names[metricOK] != "bucketgrid.policy.rules.ok" || s.headers != 0 {
		t.Fatalf("defaults: %+v", s)
	}
}
