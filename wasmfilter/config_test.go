package wasmfilter

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
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

var configSeeds = []string{
	basicConfig,
	exampleConfig,
	`{"policies": [{"name": "a", "bandwidths": [{"capacity": 1, "period": "1s"}]}]}`,
	`{"policies": [{"name": "a", "cost": 2, "slots": 8, "version": 3, "key": ["header:X", ":path"],
	  "match": {"path_prefix": "/x"}, "bandwidths": [{"id": "b", "capacity": 10, "refill_tokens": 2, "period": "1h", "style": "intervally"}]}],
	  "failure_mode": "closed", "table_full": "reject", "max_attempts": 3, "headers": {"ietf": false, "x_ratelimit": true},
	  "deny": {"body": null, "content_type": "application/json"}, "path": {"normalize": false, "ignore_case": true},
	  "shared_data_prefix": "x", "stat_prefix": "y"}`,
	`{"policies": null, "headers": null}`,
	`{"deny": {"body": "\u00e9\ud83d\ude00\n\"\\\/\b\f\r\t"}, "policies": []}`,
	`{"policies": [{"name": "a", "bandwidths": [{"capacity": 1e3, "period": "1s"}]}]}`,
	`{"policies": [{"name": "a", "bandwidths": [{"capacity": 1.0, "period": "1s"}]}]}`,
	`{"policies": [{"name": "a", "bandwidths": [{"capacity": -0, "period": "1s"}]}]}`,
	`{"policies": [{"name": "a", "bandwidths": [{"capacity": 99999999999999999999, "period": "1s"}]}]}`,
	`{"policies": [{"name": "a", "bandwidths": [{"capacity": "1", "period": "1s"}]}]}`,
	`{"policies": [{"name": "a", "name": "b"}]}`,
	`{"Policies": []}`,
	`{"policies": [], }`,
	`[1, 2]`,
	` {"policies":[]} `,
	`{"policies": [{"name": "\ud800"}]}`,
	"{\"deny\": {\"body\": \"\xff\"}}",
	`{"a": {"b": {"c": {"d": {}}}}}`,
	`{"max_attempts": 01}`,
	`{"max_attempts": -}`,
	`{"path": {"normalize": 1}}`,
	`"x"`,
	`nul`,
	``,
}

// exampleConfig is the plugin configuration of examples/envoy/envoy.yaml.
const exampleConfig = `{
  "policies": [
    {
      "name": "per-client",
      "match": {"path_prefix": "/api/"},
      "key": ["source.address"],
      "bandwidths": [
        {"id": "burst", "capacity": 10, "refill_tokens": 10, "period": "1m"},
        {"id": "hourly", "capacity": 200, "period": "1h", "style": "intervally"}
      ],
      "slots": 4096
    },
    {
      "name": "per-api-key",
      "key": ["header:x-api-key"],
      "bandwidths": [{"capacity": 100, "refill_tokens": 50, "period": "1s"}]
    }
  ],
  "failure_mode": "open",
  "table_full": "evict_oldest",
  "headers": {"ietf": true, "x_ratelimit": true},
  "deny": {"body": "{\"error\": \"rate limit exceeded\"}\n", "content_type": "application/json"}
}`

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
	for _, s := range []string{`{"policies": [{"name": "a", "name": "b"}]}`, "{\"deny\": {\"body\": \"\xff\"}}"} {
		if _, err := referenceParse([]byte(s)); err != nil {
			t.Errorf("encoding/json refuses %q: %v", s, err)
		}
		if _, err := decodeConfig([]byte(s)); err == nil {
			t.Errorf("accepted %q", s)
		}
	}
}

// TestConfigErrors pins the message of every kind of configuration error:
// one prefix, the member's path, what is wrong.
func TestConfigErrors(t *testing.T) {
	const bw = `"bandwidths": [{"capacity": 10, "period": "1s"}]`
	for _, c := range []struct{ doc, want string }{
		{``, `JSON syntax error at byte 0: empty document`},
		{`{`, `JSON syntax error at byte 1: unexpected end of document, want a member name`},
		{`{"policies": [}`, `JSON syntax error at byte 14: unexpected '}', want a value`},
		{`{"policies": []} x`, `JSON syntax error at byte 17: unexpected 'x' after the document`},
		{"{\"a\": \"\x01\"}", `JSON syntax error at byte 7: control character byte 0x1 in a string`},
		{"{\"a\": \"\xff\"}", `JSON syntax error at byte 7: invalid UTF-8 in a string`},
		{`{"a": "\q"}`, `JSON syntax error at byte 7: invalid escape \q`},
		{`{"a": 1.}`, `JSON syntax error at byte 8: unexpected '}' in a number`},
		{strings.Repeat("[", 40), `JSON syntax error at byte 33: nested more than 32 levels`},
		{`[]`, `want an object, got an array`},
		{`{"policies": {}}`, `policies: want an array, got an object`},
		{`{"policies": [], "policies": []}`, `policies: repeated member`},
		{`{"polices": []}`, `polices: unknown member`},
		{`{"policies": [{"name": "a", ` + bw + `, "slots": 1.5}]}`, `policies[0].slots: 1.5: want an integer`},
		{`{"policies": [{"name": "a", ` + bw + `, "cost": 1e2}]}`, `policies[0].cost: 1e2: want an integer`},
		{`{"policies": [{"name": "a", "bandwidths": [{"capacity": 9223372036854775808, "period": "1s"}]}]}`,
			`policies[0].bandwidths[0].capacity: 9223372036854775808: out of the range of a 64-bit integer`},
		{`{"policies": [{"name": "a", "key": [1], ` + bw + `}]}`, `policies[0].key[0]: want a string, got a number`},
		{`{"policies": []}`, `policies: none: want 1 to 16`},
		{`{"policies": [{"name": "a b", ` + bw + `}]}`, `policies[0].name: "a b": want 1 to 64 characters of [A-Za-z0-9_.-]`},
		{`{"policies": [{"name": "a", ` + bw + `}, {"name": "a", ` + bw + `}]}`, `policies[1].name: "a": also the name of policies[0]`},
		{`{"policies": [{"name": "a.b", ` + bw + `}, {"name": "a_b", ` + bw + `}]}`, `policies[1].name: "a_b": '.' becomes '_' in metric names: the name of policies[0]`},
		{`{"policies": [{"name": "x", ` + bw + `}, {"name": "a_b.c", ` + bw + `}, {"name": "a.b_c", ` + bw + `}]}`, `policies[2].name: "a.b_c": '.' becomes '_' in metric names: the name of policies[1]`},
		{`{"failure_mode": "maybe", "policies": [{"name": "a", ` + bw + `}]}`, `failure_mode: "maybe": want "open" or "closed"`},
		{`{"table_full": "drop", "policies": [{"name": "a", ` + bw + `}]}`, `table_full: "drop": want "evict_oldest", "reject" or "allow"`},
		{`{"max_attempts": 1001, "policies": [{"name": "a", ` + bw + `}]}`, `max_attempts: 1001: want 1 to 1000`},
		{`{"stat_prefix": "a.b", "policies": [{"name": "a", ` + bw + `}]}`, `stat_prefix: "a.b": want 1 to 64 characters of [A-Za-z0-9_]`},
		{`{"deny": {"content_type": "text/plain\r\nx: y"}, "policies": [{"name": "a", ` + bw + `}]}`, `deny.content_type: contains a line break or NUL`},
		{`{"policies": [{"name": "a", "match": {"path_prefix": "api"}, ` + bw + `}]}`, `policies[0].match.path_prefix: "api": must start with /`},
		{`{"policies": [{"name": "a", "key": ["x-forwarded-for"], ` + bw + `}]}`, `policies[0].key[0]: "x-forwarded-for": want source.address, header:<name>, :path, :authority or :method`},
		{`{"policies": [{"name": "a"}]}`, `policies[0].bandwidths: none: want at least one`},
		{`{"policies": [{"name": "a", "bandwidths": [{"capacity": 1, "period": "soon"}]}]}`, `policies[0].bandwidths[0].period: "soon": want a duration such as "1s", "1m" or "24h"`},
		{`{"policies": [{"name": "a", "bandwidths": [{"capacity": 1, "period": "1s"}, {"capacity": 0, "period": "1s"}]}]}`, `policies[0].bandwidths[1]: capacity must be positive`},
		{`{"policies": [{"name": "a", "bandwidths": [{"capacity": 10, "period": "5ns"}]}]}`, `policies[0].bandwidths[0]: refill faster than 1 token per nanosecond: 10 tokens per 5ns`},
		{`{"policies": [{"name": "a", "bandwidths": [{"id": "x", "capacity": 1, "period": "1s"}, {"id": "x", "capacity": 2, "period": "1s"}]}]}`, `policies[0].bandwidths[1]: duplicate bandwidth id "x"`},
		{`{"policies": [{"name": "a", "bandwidths": [{"id": "a b", "capacity": 1, "period": "1s"}]}]}`, `policies[0].bandwidths[0].id: "a b": want 1 to 64 characters of [A-Za-z0-9_.-]`},
		{`{"policies": [{"name": "a", "bandwidths": [{"capacity": 1, "period": "1s", "style": "x"}]}]}`, `policies[0].bandwidths[0].style: "x": want "greedy" or "intervally"`},
		{`{"policies": [{"name": "a", "slots": 300000, ` + bw + `}]}`, `policies[0].slots: 300000: want 1 to 262144`},
		{`{"policies": [{"name": "a", "cost": 11, ` + bw + `}]}`, `policies[0].cost: 11 exceeds the smallest capacity 10: every request would be rejected`},
		{`{"headers": {"ietf": true}, "policies": [{"name": "a", "bandwidths": [{"capacity": 1000000000000000, "period": "1000000h"}]}]}`,
			`policies[0].bandwidths[0].capacity: 1000000000000000: 1000000000000000 requests is more than the 15 digits a RateLimit-Policy integer can carry`},
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

// The 15-digit bound applies to what the headers carry: requests, so a
// cost raises the largest capacity, and without the IETF headers there is
// none (x-ratelimit-* are plain integers).
func TestConfigHeaderBounds(t *testing.T) {
	doc := func(ietf bool, capacity, cost int64) string {
		return `{"headers": {"ietf": ` + strconv.FormatBool(ietf) + `}, "policies": [{"name": "a", "cost": ` +
			strconv.FormatInt(cost, 10) + `, "bandwidths": [{"capacity": ` + strconv.FormatInt(capacity, 10) +
			`, "refill_tokens": 1, "period": "1s"}]}]}`
	}
	for _, c := range []struct {
		ietf           bool
		capacity, cost int64
		ok             bool
	}{
		{true, maxSFInteger, 1, true},
		{true, maxSFInteger + 1, 1, false},
		{true, 2*maxSFInteger + 1, 2, true},
		{true, 2*maxSFInteger + 2, 2, false},
		{false, 1 << 62, 1, true},
	} {
		if _, err := ParseConfig([]byte(doc(c.ietf, c.capacity, c.cost))); (err == nil) != c.ok {
			t.Errorf("ietf %v capacity %d cost %d: %v", c.ietf, c.capacity, c.cost, err)
		}
	}
}

func TestParseConfigDefaults(t *testing.T) {
	c, err := ParseConfig([]byte(`{"policies": [{"name": "a", "bandwidths": [{"capacity": 5, "period": "1s"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.compile()
	if err != nil {
		t.Fatal(err)
	}
	if !s.failOpen || s.tableFull != tableFullEvict || s.maxAttempts != 16 || !bytes.Equal(s.body, []byte("rate limit exceeded\n")) ||
		s.contentType != "text/plain" || s.prefix != "bucketgrid" || s.statPrefix != "bucketgrid" || !s.normalize || s.foldCase {
		t.Fatalf("defaults: %+v", s)
	}
	p := s.policies[0]
	if p.cost != 1 || p.slots != DefaultSlots || p.items != `"a";q=5;w=1` {
		t.Fatalf("policy defaults: %+v", p)
	}
}
