package tck

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/core"
)

// variant is a small in-memory cas.Store, expiring on the real clock, whose
// flaws each break one rule of the SPI the way a real store does. With no
// flaw set it is correct; with etag set its versions are digests of the
// value, which is correct too.
type variant struct {
	flaws
	mu      sync.Mutex
	entries map[string]*ventry // by stored key (after normalise)
	next    cas.Version        // the global write counter
	getBuf  []byte             // the buffer a reuseGetBuffer Get hands out
	rng     *rand.Rand
}

type ventry struct {
	data             []byte
	ver              cas.Version
	created, expires time.Time // expires zero: never
	prevData         []byte    // the value before the last Replace, and its version
	prevVer          cas.Version
}

// flaws are what a variant gets wrong; the zero value gets nothing wrong.
type flaws struct {
	etag               bool                              // versions are digests of the value (correct)
	scaleTTL           func(time.Duration) time.Duration // applied to every positive TTL
	monthAsTimestamp   bool                              // memcached: a TTL over 30 days is a Unix time
	ttlFromCreation    bool                              // Replace counts the TTL from the key's creation
	replaceDropsTTL    bool                              // Replace writes no expiry
	compareLowBits     int                               // Replace compares only this many low bits (0: all)
	perKeyVersions     bool                              // versions count per key, from 1 at each creation
	deletePrefix       bool                              // Delete removes every key with that prefix
	normalise          func(string) string               // the stored key for a key
	reuseGetBuffer     bool                              // Get returns one buffer, which the next Get overwrites
	absentOneIn        int                               // Get reports a live key absent once in this many reads
	revivesExpired     bool                              // Replace matches an expired entry's version
	keepsCallerSlice   bool                              // Insert and Replace keep the caller's slice
	insertsLose        bool                              // Insert always reports a lost race
	trimsZeros         bool                              // Get trims trailing zero bytes
	writesButLoseOneIn int                               // Replace writes, then answers "lost race", once in this many
	appliesErrsOneIn   int                               // Replace writes, then returns an error, once in this many
	maxKeyLen          int                               // longer keys are refused (0: no limit)
	keyErr             error                             // the refusal; nil: core.InvalidKey
	countsRunes        bool                              // maxKeyLen counts characters, not bytes
	zeroMatches        bool                              // Replace with version 0 matches any live entry
	deleteExpiredErrs  bool                              // Delete of an expired entry not yet reaped fails

	// The optional extensions: with extensions set the variant implements
	// cas.Writer and cas.Batcher, correctly unless a flag below says.
	extensions      bool
	currentStale    bool // a lost race reports the value and version before the key's last write
	currentOldData  bool // a lost race reports the current version with the bytes before the last write
	writtenVerWrong bool // a write reports a version other than the one it stored
	batchReversed   bool // a batch of several ops hands out their results in reverse order
	writeNoCompare  bool // Write and Batch overwrite without comparing the version
}

// newStoreVariant returns a variant, with the extensions when f says so.
func newStoreVariant(f flaws) cas.Store {
	v := newVariant(f)
	if f.extensions {
		return extVariant{v}
	}
	return v
}

func newVariant(f flaws) *variant {
	return &variant{flaws: f, entries: map[string]*ventry{}, rng: rand.New(rand.NewPCG(rand.Uint64(), 7))}
}

var errVariant = errors.New("variant: write applied, reply lost")

// refuse returns the error for a key longer than maxKeyLen, or nil.
func (s *variant) refuse(key string) error {
	n := len(key)
	if s.countsRunes {
		n = utf8.RuneCountInString(key)
	}
	if s.maxKeyLen == 0 || n <= s.maxKeyLen {
		return nil
	}
	if s.keyErr != nil {
		return s.keyErr
	}
	return core.InvalidKey(key, "longer than the variant's limit")
}

func (s *variant) stored(key string) string {
	if s.normalise != nil {
		return s.normalise(key)
	}
	return key
}

// live returns key's entry if it has not expired; s.mu held.
func (s *variant) live(k string, now time.Time) *ventry {
	e := s.entries[k]
	if e == nil || (!e.expires.IsZero() && !now.Before(e.expires)) {
		return nil
	}
	return e
}

// oneIn reports true once in n calls on average; s.mu held.
func (s *variant) oneIn(n int) bool { return n > 0 && s.rng.IntN(n) == 0 }

func (s *variant) version(k string, data []byte, prev *ventry) cas.Version {
	switch {
	case s.etag:
		sum := sha256.Sum256(data)
		return cas.Version(binary.BigEndian.Uint64(sum[:]) | 1)
	case s.perKeyVersions:
		if prev == nil {
			return 1
		}
		return prev.ver + 1
	}
	s.next++
	return s.next
}

func (s *variant) expiry(ttl time.Duration, from time.Time) time.Time {
	switch {
	case ttl <= 0:
		return time.Time{}
	case s.monthAsTimestamp && ttl > 30*24*time.Hour:
		return time.Unix(int64(ttl/time.Second), 0)
	case s.scaleTTL != nil:
		ttl = s.scaleTTL(ttl)
	}
	return from.Add(ttl)
}

func (s *variant) keep(data []byte) []byte {
	if s.keepsCallerSlice {
		return data
	}
	return bytes.Clone(data)
}

func (s *variant) Get(ctx context.Context, key string) ([]byte, cas.Version, bool, error) {
	if err := cmp.Or(s.refuse(key), ctx.Err()); err != nil {
		return nil, 0, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	data, ver, found := s.get(key)
	return data, ver, found, nil
}

// get reads key; s.mu held.
func (s *variant) get(key string) ([]byte, cas.Version, bool) {
	e := s.live(s.stored(key), time.Now())
	if e == nil || s.oneIn(s.absentOneIn) {
		return nil, 0, false
	}
	data := e.data
	if s.trimsZeros {
		data = bytes.TrimRight(data, "\x00")
	}
	if s.reuseGetBuffer {
		s.getBuf = append(s.getBuf[:0], data...)
		return s.getBuf, e.ver, true
	}
	return bytes.Clone(data), e.ver, true
}

func (s *variant) Insert(ctx context.Context, key string, data []byte, ttl time.Duration) (bool, error) {
	if err := cmp.Or(s.refuse(key), ctx.Err()); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.insert(key, data, ttl), nil
}

// insert writes key if absent; s.mu held.
func (s *variant) insert(key string, data []byte, ttl time.Duration) bool {
	k, now := s.stored(key), time.Now()
	if s.insertsLose || s.live(k, now) != nil {
		return false
	}
	s.entries[k] = &ventry{data: s.keep(data), ver: s.version(k, data, nil), created: now, expires: s.expiry(ttl, now)}
	return true
}

func (s *variant) Replace(ctx context.Context, key string, data []byte, ver cas.Version, ttl time.Duration) (bool, error) {
	if err := cmp.Or(s.refuse(key), ctx.Err()); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.replace(key, data, ver, ttl)
}

// replace writes key if it holds ver; s.mu held.
func (s *variant) replace(key string, data []byte, ver cas.Version, ttl time.Duration) (bool, error) {
	k, now := s.stored(key), time.Now()
	e := s.live(k, now)
	if s.revivesExpired {
		e = s.entries[k]
	}
	mask := ^cas.Version(0)
	if s.compareLowBits > 0 {
		mask = cas.Version(1)<<s.compareLowBits - 1
	}
	if e == nil || e.ver&mask != ver&mask && !(s.zeroMatches && ver == 0) {
		return false, nil
	}
	from := now
	if s.ttlFromCreation {
		from = e.created
	}
	expires := s.expiry(ttl, from)
	if s.replaceDropsTTL {
		expires = time.Time{}
	}
	s.entries[k] = &ventry{data: s.keep(data), ver: s.version(k, data, e), created: e.created, expires: expires,
		prevData: e.data, prevVer: e.ver}
	switch {
	case s.oneIn(s.writesButLoseOneIn):
		return false, nil
	case s.oneIn(s.appliesErrsOneIn):
		return false, errVariant
	}
	return true, nil
}

func (s *variant) Delete(ctx context.Context, key string) error {
	if err := cmp.Or(s.refuse(key), ctx.Err()); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.stored(key)
	if s.deleteExpiredErrs && s.entries[k] != nil && s.live(k, time.Now()) == nil {
		return errors.New("variant: document not found") // the entry is there, but expired
	}
	if !s.deletePrefix {
		delete(s.entries, k)
		return nil
	}
	for other := range s.entries {
		if strings.HasPrefix(other, k) {
			delete(s.entries, other)
		}
	}
	return nil
}

// extVariant is a variant with the optional extensions, cas.Writer and
// cas.Batcher, which its flaws may break too.
type extVariant struct{ *variant }

func (s extVariant) Write(ctx context.Context, op *cas.Op) error {
	if err := cmp.Or(s.refuse(op.Key), ctx.Err()); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.write(op)
}

// write performs op and reports its outcome; s.mu held.
func (s extVariant) write(op *cas.Op) error {
	var ok bool
	var err error
	k := s.stored(op.Key)
	switch op.Kind {
	case cas.OpInsert:
		ok = s.insert(op.Key, op.Data, op.TTL)
	case cas.OpReplace:
		ver := op.Ver
		if e := s.live(k, time.Now()); e != nil && s.writeNoCompare {
			ver = e.ver
		}
		ok, err = s.replace(op.Key, op.Data, ver, op.TTL)
	default:
		return errors.New("variant: not a write")
	}
	if err != nil {
		return err
	}
	r := &op.Result
	e := s.live(k, time.Now())
	if ok {
		r.Written, r.Ver = true, e.ver
		if s.writtenVerWrong {
			r.Ver++
		}
		return nil
	}
	r.Current = true
	if e == nil {
		return nil
	}
	r.Found, r.Data, r.Ver = true, bytes.Clone(e.data), e.ver
	switch {
	case s.currentStale && e.prevData != nil:
		r.Data, r.Ver = bytes.Clone(e.prevData), e.prevVer
	case s.currentOldData && e.prevData != nil:
		r.Data = bytes.Clone(e.prevData)
	}
	return nil
}

func (s extVariant) Batch(ctx context.Context, ops []*cas.Op) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	results := make([]cas.Result, len(ops))
	for i, op := range ops {
		op.Result = cas.Result{}
		switch err := s.refuse(op.Key); {
		case err != nil:
			op.Result.Err = err
		case op.Kind == cas.OpGet:
			r := &op.Result
			r.Data, r.Ver, r.Found = s.get(op.Key)
		default:
			if err := s.write(op); err != nil {
				op.Result = cas.Result{Err: err}
			}
		}
		results[i] = op.Result
	}
	if s.batchReversed {
		for i, op := range ops {
			op.Result = results[len(ops)-1-i]
		}
	}
	return nil
}

// runeChecker is a variant whose key checker counts characters, as its
// Inserts do, while the variant keeps only maxKeyLen bytes of a key.
type runeChecker struct{ *variant }

func (s runeChecker) CheckKey(key string) error { return s.refuse(key) }
