package tck

import (
	"bytes"
	"fmt"

	"github.com/bucketgrid/bucketgrid/cas"
)

// versionRule is the rule of cas.Version in one line, for failure messages.
const versionRule = "the cas.Version rule: a version names the stored bytes — Replace(ver) may write only while the key holds exactly the bytes Get returned with ver — so a version must change whenever the bytes change and must never name other bytes later, across Delete and expiry too (a write counter that never repeats, or a digest of the value, both qualify)"

// versionLog remembers, for one key, which bytes each version named.
type versionLog struct {
	e     *env
	key   string
	named map[cas.Version][]byte
	label map[string]string // bytes → a name for messages
}

func (l *versionLog) name(b []byte) string {
	if n, ok := l.label[string(b)]; ok {
		return n
	}
	return fmt.Sprintf("%x", head(b))
}

// read gets the key, which must hold want, and records its version.
func (l *versionLog) read(want []byte, when string) cas.Version {
	got, ver, found, err := l.e.store.Get(l.e.ctx, l.key)
	if err != nil || !found {
		l.e.Fatalf("Get %s: found=%v err=%v; want value %s", when, found, err, l.name(want))
	}
	if !bytes.Equal(got, want) {
		l.e.Fatalf("Get %s returned %s", when, mismatch(got, want))
	}
	if prev, ok := l.named[ver]; ok && !bytes.Equal(prev, got) {
		l.e.Errorf("version %d named value %s and, %s, value %s: a client that read %s and stalled would overwrite %s (ABA). This breaks %s. A per-key counter that restarts after a Delete or an expiry does exactly this; use a global counter, the store's own revision or CAS, or a random 64-bit value",
			ver, l.name(prev), when, l.name(got), l.name(prev), l.name(got), versionRule)
	}
	l.named[ver] = got
	return ver
}

// write replaces the key's value, which must succeed.
func (l *versionLog) write(ver cas.Version, val []byte, when string) {
	ok, err := l.e.store.Replace(l.e.ctx, l.key, val, ver, 0)
	if err != nil || !ok {
		l.e.Fatalf("Replace with the current version %s: ok=%v err=%v; want it written", when, ok, err)
	}
}

// staleLose replaces with every recorded version that names other bytes
// than cur: each must lose, and the key must keep cur.
func (l *versionLog) staleLose(cur []byte, when string) {
	for ver, b := range l.named {
		if bytes.Equal(b, cur) {
			continue // a version of the current bytes may win, by the rule
		}
		ok, err := l.e.store.Replace(l.e.ctx, l.key, []byte("stale\x00"), ver, 0)
		if err != nil {
			l.e.Fatalf("Replace with a stale version %s: %v; want a lost race (ok=false, err=nil)", when, err)
		}
		if ok {
			l.e.Fatalf("Replace with version %d, which named value %s, succeeded %s while the key held %s: a stale version won. This breaks %s",
				ver, l.name(b), when, l.name(cur), versionRule)
		}
	}
	l.read(cur, when+", after the stale Replaces lost")
}

// checkVersions checks the version rule (see cas.Version) before anything
// else leans on it: versions change with the bytes, stale versions lose,
// Replace compares all 64 bits, and no version names two values — across
// a Delete too. A store whose versions are digests of the value (an ETag)
// passes: equal versions for equal bytes are what a digest is.
func checkVersions(e *env) {
	s, ctx := e.store, e.ctx
	a, b, c, d := []byte{'A', 0}, []byte{'B', 0, 0}, []byte{'C', 0}, []byte{'D', 0, 0, 0}
	l := &versionLog{e: e, key: e.key("versions"), named: map[cas.Version][]byte{},
		label: map[string]string{string(a): "A", string(b): "B", string(c): "C", string(d): "D"}}
	if ok, err := s.Insert(ctx, l.key, a, 0); err != nil || !ok {
		e.Fatalf("Insert of an absent key: ok=%v err=%v; want it written", ok, err)
	}
	v1 := l.read(a, "after Insert A")
	l.write(v1, b, "(A→B)")
	v2 := l.read(b, "after Replace A→B")
	if v2 == v1 {
		e.Errorf("Replace changed the value from A to B but the version stayed %d: a stale client holding it would overwrite B. This breaks %s", v1, versionRule)
	}
	l.write(v2, b, "(B→B, the same bytes)")
	v3 := l.read(b, "after Replace B→B")
	if v3 == v2 {
		e.Logf("versions follow the bytes (rewriting B kept version %d): a digest of the value, which the rule allows", v2)
	} else {
		e.Logf("versions name writes (rewriting B changed version %d to %d)", v2, v3)
	}
	l.write(v3, a, "(B→A)")
	v4 := l.read(a, "after Replace B→A")
	l.staleLose(a, "after A→B→B→A")
	forgedVersions(e, l.key, v4, a)
	zeroVersion(e, l.key, a)

	if e.cfg.noDelete != "" {
		return
	}
	if err := s.Delete(ctx, l.key); err != nil {
		e.Fatalf("Delete: %v", err)
	}
	if ok, err := s.Insert(ctx, l.key, c, 0); err != nil || !ok {
		e.Fatalf("Insert after Delete: ok=%v err=%v; a deleted key is absent", ok, err)
	}
	v5 := l.read(c, "after Delete and Insert C")
	l.staleLose(c, "after Delete and Insert C")
	l.write(v5, d, "(C→D)")
	l.read(d, "after Replace C→D")
	l.staleLose(d, "after Delete, Insert C and Replace C→D")
}

// forgedVersions replaces key, which holds val under version cur, with cur
// with one bit flipped, for each of its 64 bits: none may write. A store
// that compares only part of the version (its low byte, a 32-bit field)
// accepts some, and on a hot key a stale client's version eventually
// matches by chance.
func forgedVersions(e *env, key string, cur cas.Version, val []byte) {
	var accepted []int
	for bit := range 64 {
		forged := cur ^ cas.Version(1)<<bit
		ok, err := e.store.Replace(e.ctx, key, []byte("forged\x00"), forged, 0)
		if err != nil || !ok {
			continue // refused, as it must be; an error is allowed here
		}
		accepted = append(accepted, bit)
		// the forged write landed: put val back under a fresh version
		_, v, found, err := e.store.Get(e.ctx, key)
		if err != nil || !found {
			e.Fatalf("Get after a forged Replace: found=%v err=%v", found, err)
		}
		if ok, err := e.store.Replace(e.ctx, key, val, v, 0); err != nil || !ok {
			e.Fatalf("Replace restoring the value: ok=%v err=%v", ok, err)
		}
		if _, cur, _, err = e.store.Get(e.ctx, key); err != nil {
			e.Fatalf("Get: %v", err)
		}
	}
	if len(accepted) == 0 {
		return
	}
	low := accepted[0]
	contiguous := accepted[len(accepted)-1] == 63 && len(accepted) == 64-low
	if contiguous && low == 0 {
		e.Errorf("Replace accepted versions that differ from the stored one in every bit: it does not compare the version at all, so every stale client overwrites newer buckets. Write only while the stored version equals ver, in one atomic step")
		return
	}
	if contiguous {
		e.Errorf("Replace accepted a version that differs from the stored one in any of bits %d..63: it compares only the low %d bits of the version, so on a hot key a stale client's version matches by chance about once in %d writes and overwrites a newer bucket. Compare all 64 bits (store the version as a 64-bit integer or 8 bytes)", low, low, uint64(1)<<low)
		return
	}
	e.Errorf("Replace accepted versions that differ from the stored one in bit(s) %v (of 64; %d ignored): it does not compare the whole version, so a stale client's version can match. Compare all 64 bits", accepted, len(accepted))
}

// zeroVersion replaces key, which holds val, and an absent key, with
// version 0: neither may write. 0 is the version of nothing (the zero
// value a caller passes when it has read none); a store that treats it as
// "any version" (an unset CAS field meaning "unconditional", as Couchbase's
// cas 0 and Envoy's shared-data cas 0 do) overwrites every bucket for such
// a caller. forgedVersions meets 0 only when the current version has one
// bit set.
func zeroVersion(e *env, key string, val []byte) {
	if ok, err := e.store.Replace(e.ctx, key, []byte("zero\x00"), 0, 0); err == nil && ok {
		e.Errorf("Replace with version 0 succeeded on a key holding another version: the store treats 0 as \"any version\" (an unset CAS meaning unconditional), so a caller without a version overwrites the bucket. Version 0 names no bytes: Replace(0) must always lose. This breaks %s", versionRule)
	}
	got, _, found, err := e.store.Get(e.ctx, key)
	if err != nil || !found || !bytes.Equal(got, val) {
		e.Fatalf("Get after a Replace with version 0: found=%v err=%v, %s", found, err, mismatch(got, val))
	}
	absent := key + "-zero-absent"
	if ok, err := e.store.Replace(e.ctx, absent, []byte("zero\x00"), 0, 0); err == nil && ok {
		e.Errorf("Replace with version 0 of an absent key succeeded: Replace never creates a key, and version 0 names no bytes")
	}
	if _, _, found, err := e.store.Get(e.ctx, absent); err != nil || found {
		e.Errorf("Get of an absent key after a Replace with version 0: found=%v err=%v; want absent", found, err)
	}
}
