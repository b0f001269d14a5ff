package policy_test

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/bucketgrid/bucketgrid/policy"
)

func u64(v uint64) *uint64 { return &v }

func desc(kv ...string) Descriptor {
	var d Descriptor
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, Entry{kv[i], kv[i+1]})
	}
	return d
}

func TestPlanHits(t *testing.T) {
	c := load(t, Options{}, shop)
	withHits := desc("client", "a")
	withHits.HitsAddend = u64(7)
	checkOnly := desc("client", "a")
	checkOnly.HitsAddend = u64(0)
	for _, tc := range []struct {
		name    string
		request uint32
		d       Descriptor
		want    uint64
	}{
		{"default", 0, desc("client", "a"), 1},
		{"request's hits", 5, desc("client", "a"), 5},
		{"descriptor's hits win", 5, withHits, 7},
		{"descriptor's zero is a check", 5, checkOnly, 0},
	} {
		items, err := c.Items(&Request{Domain: "shop", Descriptors: []Descriptor{tc.d}, HitsAddend: tc.request})
		if err != nil {
			t.Fatal(err)
		}
		if items[0].Hits != tc.want {
			t.Errorf("%s: %d hits, want %d", tc.name, items[0].Hits, tc.want)
		}
	}
}

func TestPlanReplacesAndUnlimited(t *testing.T) {
	c := load(t, Options{}, yml(`
		|domain: d
		|descriptors:
		|  - key: user
		|    rate_limit: {unit: minute, requests_per_unit: 10, name: per_user}
		|  - key: premium
		|    rate_limit: {unit: minute, requests_per_unit: 100, replaces: [{name: per_user}]}
		|  - key: internal
		|    rate_limit: {unlimited: true, replaces: [{name: per_user}]}
		|  - key: ip
		|    rate_limit: {unit: minute, requests_per_unit: 5, name: per_ip}`))
	kinds := func(ds ...Descriptor) []ItemKind {
		items, err := c.Items(&Request{Domain: "d", Descriptors: ds})
		if err != nil {
			t.Fatal(err)
		}
		var k []ItemKind
		for _, it := range items {
			k = append(k, it.Kind)
		}
		return k
	}
	for _, tc := range []struct {
		name string
		got  []ItemKind
		want []ItemKind
	}{
		{"alone", kinds(desc("user", "u")), []ItemKind{Limited}},
		{"replaced by a later descriptor", kinds(desc("user", "u"), desc("premium", "p")), []ItemKind{NoLimit, Limited}},
		{"replaced by an earlier descriptor", kinds(desc("premium", "p"), desc("user", "u")), []ItemKind{Limited, NoLimit}},
		{"replaced by an unlimited rule", kinds(desc("internal", "i"), desc("user", "u")), []ItemKind{Unlimited, NoLimit}},
		{"others untouched", kinds(desc("premium", "p"), desc("ip", "1.2.3.4"), desc("user", "u")), []ItemKind{Limited, Limited, NoLimit}},
		{"unmatched", kinds(desc("nothing", "x"), desc("user", "u")), []ItemKind{NoLimit, Limited}},
	} {
		if !equalKinds(tc.got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	items, _ := c.Items(&Request{Domain: "d", Descriptors: []Descriptor{desc("internal", "i"), desc("nothing", "x")}})
	for i, want := range []Status{{Code: OK, Remaining: math.MaxUint32}, {Code: OK}} {
		if got, err := items[i].Decide(nil, time.Now()); err != nil || got != want || items[i].Ops() != nil {
			t.Errorf("item %d: %+v %v, want %+v without operations", i, got, err, want)
		}
	}
}

func equalKinds(a, b []ItemKind) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestPlanErrors(t *testing.T) {
	c := load(t, Options{}, shop)
	many := make([]Descriptor, MaxDescriptors+1)
	for i := range many {
		many[i] = desc("client", "a")
	}
	wide := Descriptor{Entries: make([]Entry, MaxEntries+1)}
	big := desc("client", strings.Repeat("x", MaxDescriptorBytes))
	for _, tc := range []struct {
		name string
		req  Request
		want error
	}{
		{"empty domain", Request{Descriptors: []Descriptor{desc("client", "a")}}, ErrEmptyDomain},
		{"long domain", Request{Domain: strings.Repeat("d", MaxDomainBytes+1), Descriptors: []Descriptor{desc("client", "a")}}, ErrDomainTooLong},
		{"no descriptors", Request{Domain: "shop"}, ErrNoDescriptors},
		{"too many descriptors", Request{Domain: "shop", Descriptors: many}, ErrTooManyDescriptors},
		{"too many entries", Request{Domain: "shop", Descriptors: []Descriptor{wide}}, ErrTooManyEntries},
		{"too many bytes", Request{Domain: "shop", Descriptors: []Descriptor{big}}, ErrDescriptorTooLarge},
		{"invalid UTF-8 domain", Request{Domain: "sh\xffop", Descriptors: []Descriptor{desc("client", "a")}}, ErrInvalidUTF8},
		{"override without unit", Request{Domain: "shop", Descriptors: []Descriptor{{Entries: []Entry{{"a", "b"}}, Limit: &Override{RequestsPerUnit: 1}}}}, ErrOverrideUnit},
		{"override too fast", Request{Domain: "shop", Descriptors: []Descriptor{{Entries: []Entry{{"a", "b"}}, Limit: &Override{RequestsPerUnit: 2e9, Unit: Second}}}}, ErrOverrideTooFast},
	} {
		if _, err := c.Items(&tc.req); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	// the bounds are inclusive
	fits := desc("client", strings.Repeat("x", MaxDescriptorBytes-len("client")))
	if _, err := c.Items(&Request{Domain: "shop", Descriptors: append(many[:MaxDescriptors-1:MaxDescriptors-1], fits)}); err != nil {
		t.Fatalf("request at the bounds: %v", err)
	}
	// A value that is not UTF-8 (a client's header bytes) is a value like
	// any other, with a bucket of its own.
	keys := map[string]string{}
	for _, v := range []string{"\xff", "\xfe", "\xff\xfe", "a\xc3(", "\xed\xa0\x80", "\xc0\xaf", "é"} {
		items, err := c.Items(&Request{Domain: "shop", Descriptors: []Descriptor{desc("client", v)}})
		if err != nil || len(items) != 1 || items[0].Kind != Limited {
			t.Fatalf("value %q: %v %+v", v, err, items)
		}
		if other, dup := keys[items[0].Key]; dup {
			t.Fatalf("values %q and %q share a bucket", v, other)
		}
		keys[items[0].Key] = v
	}
}

func TestBucketKeys(t *testing.T) {
	c := load(t, Options{}, shop+"\n"+yml(`
		|  - key: file
		|    value: f/*
		|    share_threshold: true
		|    rate_limit: {unit: minute, requests_per_unit: 9}`))
	key := func(d Descriptor) string {
		t.Helper()
		items, err := c.Items(&Request{Domain: "shop", Descriptors: []Descriptor{d}})
		if err != nil {
			t.Fatal(err)
		}
		return items[0].Key
	}
	a, b := key(desc("client", "a")), key(desc("client", "b"))
	if a == b {
		t.Fatalf("two clients share %q", a)
	}
	if want := `rls/"shop"/"client"="a"`; a != want {
		t.Fatalf("key %q, want %q", a, want)
	}
	// characters that would join fields in a naive key do not
	if key(desc("client", `a"/"client"="b`)) == key(desc("client", "a")) {
		t.Fatal("quoting collision")
	}
	if k1, k2 := key(desc("file", "f/1")), key(desc("file", "f/2")); k1 != k2 || !strings.Contains(k1, `"f/*"`) {
		t.Fatalf("share_threshold keys %q and %q, want one shared key with the pattern", k1, k2)
	}
	long1, long2 := key(desc("client", strings.Repeat("é", 500))), key(desc("client", strings.Repeat("é", 499)+"e"))
	if len(long1) > MaxKeyBytes || long1 == long2 || !strings.HasPrefix(long1, "rls/#") {
		t.Fatalf("long keys %q and %q", long1, long2)
	}
	if k := key(desc("client", "ünï")); strings.ContainsFunc(k, func(r rune) bool { return r > 127 }) {
		t.Fatalf("key %q is not ASCII", k)
	}
	// the limit is not in the key: an override, another algorithm and
	// another limit for the same entries count in one bucket
	over := desc("client", "a")
	over.Limit = &Override{RequestsPerUnit: 99, Unit: Hour}
	if k := key(over); k != a {
		t.Fatalf("override key %q, want the rule's %q", k, a)
	}
	tb := load(t, Options{Algorithm: TokenBucket}, shop)
	items, _ := tb.Items(&Request{Domain: "shop", Descriptors: []Descriptor{desc("client", "a")}})
	if items[0].Key != a {
		t.Fatalf("token bucket key %q, want %q", items[0].Key, a)
	}
}

// TestRequestErrorTexts: the request errors name the bounds they enforce.
func TestRequestErrorTexts(t *testing.T) {
	for err, bound := range map[error]int{ErrDomainTooLong: MaxDomainBytes, ErrTooManyDescriptors: MaxDescriptors,
		ErrTooManyEntries: MaxEntries, ErrDescriptorTooLarge: MaxDescriptorBytes, ErrOverrideTooFast: 999_999_999} {
		if !strings.Contains(err.Error(), " "+strconv.Itoa(bound)+" ") {
			t.Errorf("%q does not name its bound %d", err, bound)
		}
	}
}
