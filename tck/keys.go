package tck

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/bucketgrid/bucketgrid/core"
)

// A keyGroup is a set of distinct keys a store might confuse: distinct byte
// strings are distinct buckets, or two clients share one.
type keyGroup struct {
	how  string // what the keys have in common
	does string // what a store that merges them does
	keys []string
	must bool // the store must hold every key; otherwise it may refuse some with core.ErrInvalidKey
}

// keyCheck runs the key checks on one store.
type keyCheck struct {
	e    *env
	base string
}

// name shows a kit key in a message: the part after the run's prefix,
// quoted, or its length and ends when it is long.
func (kc keyCheck) name(k string) string {
	rest := strings.TrimPrefix(k, kc.base)
	if len(k) > 48 {
		return fmt.Sprintf("the %d-byte key ending in %q", len(k), k[len(k)-8:])
	}
	if rest != k {
		return strconv.Quote("…" + rest)
	}
	return strconv.Quote(k)
}

// refusal reports whether err refuses key as invalid; any other error
// fails the check.
func (kc keyCheck) refusal(op, k string, err error) bool {
	if errors.Is(err, core.ErrInvalidKey) {
		return true
	}
	kc.e.Errorf("%s of %s failed: %v. A key the store cannot hold must be refused with an error wrapping core.ErrInvalidKey (core.InvalidKey), before any I/O: any other error reads as an outage, and a fail-open limiter admits the request",
		op, kc.name(k), err)
	return false
}

// group inserts every key of g with a value of its own and reads each
// back: none may land on another's entry.
func (kc keyCheck) group(g keyGroup) {
	e := kc.e
	vals := map[string]int{} // value → index of its key
	value := func(i int) []byte { return []byte{'k', byte(i), 0} }
	var held []int
	for i, k := range g.keys {
		vals[string(value(i))] = i
		ok, err := e.store.Insert(e.ctx, k, value(i), 0)
		switch {
		case err != nil:
			if kc.refusal("Insert", k, err) {
				switch {
				case g.must && e.cfg.maxKeyLen >= len(k):
					e.Errorf("Insert of %s was refused as an invalid key (%v), but the store declares (WithMaxKeyLen) that it holds keys of up to %d bytes: declare the real maximum", kc.name(k), err, e.cfg.maxKeyLen)
				case g.must:
					e.Errorf("Insert of %s was refused as an invalid key (%v), but keys that %s must be held by every store (declare a shorter limit with WithMaxKeyLen if yours is below 64 bytes)", kc.name(k), err, g.how)
				default:
					e.Logf("the store refuses %s as an invalid key", kc.name(k))
				}
			}
			continue
		case !ok:
			got, _, found, _ := e.store.Get(e.ctx, k)
			if !found {
				e.Errorf("Insert of %s, a key never written, reported a lost race, yet Get finds it absent: Insert and Get map the key to different entries — the keys %s, and the store %s in one method and not the other — or Insert reports lost races that did not happen. Keys are byte strings: keep them exactly, or refuse the ones you cannot hold with an error wrapping core.ErrInvalidKey",
					kc.name(k), g.how, g.does)
				continue
			}
			other := "another key"
			if j, known := vals[string(got)]; known && j != i {
				other = kc.name(g.keys[j])
			}
			e.Errorf("Insert of %s reported the key present, but only %s had been written: the keys %s, yet the store gives them one entry — it %s. Keys are byte strings: keep them exactly, or refuse the ones you cannot hold with an error wrapping core.ErrInvalidKey; merged keys make distinct clients share a bucket",
				kc.name(k), other, g.how, g.does)
			continue
		}
		held = append(held, i)
	}
	for _, i := range held {
		k := g.keys[i]
		got, _, found, err := e.store.Get(e.ctx, k)
		switch {
		case err != nil:
			e.Errorf("Get of %s, which Insert accepted: %v", kc.name(k), err)
		case !found:
			e.Errorf("Get of %s, which Insert accepted, reported it absent: the keys %s, and the store lost one of them — it %s", kc.name(k), g.how, g.does)
		case !bytes.Equal(got, value(i)):
			other := "no key the kit wrote"
			if j, known := vals[string(got)]; known {
				other = kc.name(g.keys[j])
			}
			e.Errorf("Get of %s returned the value of %s: the keys %s, and the store gives them one entry — it %s. Keys are byte strings: keep them exactly",
				kc.name(k), other, g.how, g.does)
		}
	}
}

// padded returns base extended to n bytes with a fixed pattern, ending in
// last.
func padded(base string, n int, last byte) string {
	const pattern = "0123456789abcdefghijklmnopqrstuvwxyz"
	b := []byte(base)
	for len(b) < n-1 {
		b = append(b, pattern[len(b)%len(pattern)])
	}
	return string(append(b[:n-1], last))
}

// multibyte returns base extended to exactly n+j bytes with copies of r
// (after the few ASCII bytes that align them), ending in last: the copies
// end j bytes past byte n-1, so for j in 1 … len(r)-1 a copy of r straddles
// the boundary between bytes n-1 and n — the place a column of n-1 bytes
// cuts. It needs n > len(base) + len(r).
func multibyte(base string, n int, r string, j int, last byte) string {
	room := n + j - 1 - len(base) // bytes between base and last
	copies := room / len(r)
	var b strings.Builder
	b.WriteString(base)
	b.WriteString(strings.Repeat("-", room-copies*len(r)))
	b.WriteString(strings.Repeat(r, copies))
	b.WriteByte(last)
	return b.String()
}

// runesLong returns base extended with copies of r to n characters, ending
// in last.
func runesLong(base string, n int, r string, last byte) string {
	var b strings.Builder
	b.WriteString(base)
	for c := utf8.RuneCountInString(base); c < n-1; c++ {
		b.WriteString(r)
	}
	b.WriteByte(last)
	return b.String()
}

// checkKeys checks that distinct keys are distinct entries — case,
// whitespace, Unicode forms, binary bytes, long keys up to the store's
// declared maximum — that a key over the maximum is refused as invalid, and
// that Delete removes exactly the key it names.
func checkKeys(e *env) {
	kc := keyCheck{e: e, base: e.key("k")}
	b := kc.base
	groups := []keyGroup{
		{how: "differ only in letter case", does: "folds case (a case-insensitive collation or index?)", must: true,
			keys: []string{b + "-case", b + "-Case", b + "-CASE"}},
		{how: "differ only in leading or trailing whitespace", does: "trims whitespace (a CHAR column, strings.TrimSpace?)",
			keys: []string{b + "-sp", b + "-sp ", b + "-sp  ", b + "-sp\t", " " + b + "-sp"}},
		{how: "are one text in two Unicode normal forms", does: "normalises Unicode",
			keys: []string{b + "-\u00e9", b + "-e\u0301"}},
		{how: "differ in NUL bytes or bytes that are not UTF-8", does: "cuts keys at a NUL byte (C strings) or rewrites invalid UTF-8",
			keys: []string{b + "-\x00", b + "-\x00\x00", b + "-\x00z", b + "-\xff", b + "-\xfe", b + "-\xc3"}},
	}
	limit := e.cfg.maxKeyLen
	if limit > 0 && limit < len(b)+8 {
		e.Fatalf("WithMaxKeyLen(%d) is shorter than the kit's own keys (up to %d bytes): the kit cannot run on such a store", limit, len(b)+8)
	}
	lengths := []int{64, 65, 129, 251, 1025}
	for _, n := range lengths {
		if limit > 0 && n > limit {
			continue
		}
		groups = append(groups, keyGroup{
			how:  fmt.Sprintf("are %d bytes long and differ only in the last", n),
			does: fmt.Sprintf("truncates keys to fewer than %d bytes (or hashes only a prefix)", n),
			must: n <= 64 || limit > 0,
			keys: []string{padded(b, n, 'x'), padded(b, n, 'y')},
		})
	}
	// Multi-byte keys: a store that counts characters where it should count
	// bytes (a VARCHAR(n) of characters, a rune count) accepts keys whose
	// bytes then overflow what it keeps.
	for _, r := range []string{"é", "日", "😀"} {
		for _, n := range lengths {
			if limit > 0 && n > limit {
				continue
			}
			// Exactly n bytes, then each way a character can straddle
			// byte n-1 (the keys stay below the declared maximum).
			for j := range len(r) {
				if limit > 0 && n+j > limit {
					break
				}
				p := b + "-m" + strconv.Itoa(n) + "." + strconv.Itoa(j) // lengths that round alike stay apart
				x, y := multibyte(p, n, r, j, 'x'), multibyte(p, n, r, j, 'y')
				groups = append(groups, keyGroup{
					how:  fmt.Sprintf("are %d bytes long, mostly %d-byte characters (%q), and differ only in the last byte", len(x), len(r), r),
					does: fmt.Sprintf("keeps fewer than %d bytes of a key of %d characters: it counts characters where it must count bytes, or truncates bytes", len(x), utf8.RuneCountInString(x)),
					must: limit > 0,
					keys: []string{x, y},
				})
			}
		}
		if limit > 0 && limit > len(b)+8+len(r) {
			// At the declared maximum exactly, a character ending on it;
			// one character past it is refused (below, with overLong).
			x := multibyte(b+"-mmax", limit, r, 0, 'x')
			groups = append(groups, keyGroup{
				how:  fmt.Sprintf("are %d bytes long — the declared maximum — mostly %d-byte characters (%q), and differ only in the last byte", limit, len(r), r),
				does: fmt.Sprintf("truncates keys of %d characters to fewer than %d bytes, its declared maximum", utf8.RuneCountInString(x), limit),
				must: true,
				keys: []string{x, multibyte(b+"-mmax", limit, r, 0, 'y')},
			})
		}
		if limit > 0 {
			k := runesLong(b, limit, r, 'x')
			groups = append(groups, keyGroup{
				how:  fmt.Sprintf("are %d characters long — the declared maximum, counted in characters — but %d bytes of %q, and differ only in the last", limit, len(k), r),
				does: fmt.Sprintf("counts characters against its maximum of %d bytes, accepts a %d-byte key and keeps only part of it: check the length in bytes (len, not utf8.RuneCountInString) and refuse longer keys with an error wrapping core.ErrInvalidKey", limit, len(k)),
				keys: []string{k, runesLong(b, limit, r, 'y')},
			})
		}
	}
	if limit > 0 {
		groups = append(groups, keyGroup{
			how:  fmt.Sprintf("are %d bytes long — the declared maximum — and differ only in the last", limit),
			does: fmt.Sprintf("truncates keys to fewer than %d bytes, its declared maximum", limit),
			must: true,
			keys: []string{padded(b, limit, 'x'), padded(b, limit, 'y')},
		})
	}
	for _, g := range groups {
		kc.group(g)
	}
	if limit > 0 {
		kc.overLong(padded(b, limit, 'x')+"z", limit)
		// A character that crosses the maximum: a store that cuts at a
		// character boundary instead of refusing keeps a prefix.
		for _, r := range []string{"é", "日", "😀"} {
			if limit > len(b)+8+len(r) {
				kc.overLong(multibyte(b+"-mover", limit+1, r, len(r)-1, 'x'), limit)
			}
		}
	}
	if e.cfg.noDelete == "" {
		kc.deleteExactlyOne()
	}
}

// overLong checks that every method refuses k, a key over the declared
// maximum, as an invalid key (the ASCII one's max-byte prefix is live).
func (kc keyCheck) overLong(k string, limit int) {
	e := kc.e
	ok, err := e.store.Insert(e.ctx, k, []byte{'o', 0}, 0)
	switch {
	case err == nil && ok:
		e.Errorf("Insert of a %d-byte key succeeded, though the store declares (WithMaxKeyLen) that it holds at most %d bytes: declare the real maximum, or refuse longer keys with an error wrapping core.ErrInvalidKey", len(k), limit)
		return
	case err == nil:
		e.Errorf("Insert of a %d-byte key, over the declared maximum of %d, reported a lost race: the key was cut to %d bytes or fewer and landed on the entry of its prefix. Refuse keys over the maximum with an error wrapping core.ErrInvalidKey (core.InvalidKey) before any I/O: never truncate them", len(k), limit, limit)
		return
	case !kc.refusal("Insert", k, err):
		return
	}
	if _, _, found, err := e.store.Get(e.ctx, k); err == nil || !errors.Is(err, core.ErrInvalidKey) {
		e.Errorf("Get of a %d-byte key, over the declared maximum of %d: found=%v err=%v; want an error wrapping core.ErrInvalidKey, as Insert returns: every method must refuse the key the same way", len(k), limit, found, err)
	}
	if ok, err := e.store.Replace(e.ctx, k, []byte{'o', 0}, 1, 0); err == nil || !errors.Is(err, core.ErrInvalidKey) {
		e.Errorf("Replace of a %d-byte key, over the declared maximum of %d: ok=%v err=%v; want an error wrapping core.ErrInvalidKey", len(k), limit, ok, err)
	}
	if err := e.store.Delete(e.ctx, k); err == nil || !errors.Is(err, core.ErrInvalidKey) {
		e.Errorf("Delete of a %d-byte key, over the declared maximum of %d: err=%v; want an error wrapping core.ErrInvalidKey", len(k), limit, err)
	}
}

// deleteExactlyOne deletes one key among keys that share its prefix, and
// one absent key whose name is a pattern: only the first may go.
func (kc keyCheck) deleteExactlyOne() {
	e := kc.e
	p := kc.base + "-del"
	keys := []string{p, p + "x", p + "/x", p + ":1", p[:len(p)-1], p + "*"}
	for i, k := range keys {
		if ok, err := e.store.Insert(e.ctx, k, []byte{'d', byte(i), 0}, 0); err != nil || !ok {
			e.Fatalf("Insert of %s: ok=%v err=%v; want it written", kc.name(k), ok, err)
		}
	}
	for _, k := range []string{p + "?", p + "[x]", p + "-absent"} {
		if err := e.store.Delete(e.ctx, k); err != nil {
			e.Fatalf("Delete of the absent key %s: %v; deleting an absent key is not an error", kc.name(k), err)
		}
	}
	if err := e.store.Delete(e.ctx, p); err != nil {
		e.Fatalf("Delete: %v", err)
	}
	if _, _, found, err := e.store.Get(e.ctx, p); err != nil || found {
		e.Errorf("Get after Delete: found=%v err=%v; want absent", found, err)
	}
	for i, k := range keys[1:] {
		got, _, found, err := e.store.Get(e.ctx, k)
		if err != nil {
			e.Fatalf("Get of %s: %v", kc.name(k), err)
		}
		if !found || !bytes.Equal(got, []byte{'d', byte(i + 1), 0}) {
			e.Errorf("after Delete of %s and of absent keys named like patterns (%q, %q), %s is gone (found=%v): Delete must remove exactly the key it names — this store deletes by prefix or pattern (SCAN MATCH prefix* then DEL, a glob, a range delete), so RemoveBucket resets other clients' buckets",
				kc.name(p), "…-del?", "…-del[x]", kc.name(k), found)
		}
	}
}
