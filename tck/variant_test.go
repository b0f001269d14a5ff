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
}

func newVariant(f flaws) *variant {
	return &variant{flaws: f, entries: map[string]*ventry{}, rng: rand.New(rand.NewPCG(rand.Uint64(), 7))}
}

var errVariant = errors.New("variant: write applied, reply lost")

// refuse returns the error for a key longer than maxKeyLen, or nil.
func (s *variant) refuse(key string) error {
	if s.maxKeyLen == 0 || len(key) <= s.maxKeyLen {
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
	e := s.live(s.stored(key), time.Now())
	if e == nil || s.oneIn(s.absentOneIn) {
		return nil, 0, false, nil
	}
	data := e.data
	if s.trimsZeros {
		data = bytes.TrimRight(data, "\x00")
	}
	if s.reuseGetBuffer {
		s.getBuf = append(s.getBuf[:0], data...)
		return s.getBuf, e.ver, true, nil
	}
	return bytes.Clone(data), e.ver, true, nil
}

func (s *variant) Insert(ctx context.Context, key string, data []byte, ttl time.Duration) (bool, error) {
	if err := cmp.Or(s.refuse(key), ctx.Err()); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k, now := s.stored(key), time.Now()
	if s.insertsLose || s.live(k, now) != nil {
		return false, nil
	}
	s.entries[k] = &ventry{data: s.keep(data), ver: s.version(k, data, nil), created: now, expires: s.expiry(ttl, now)}
	return true, nil
}

func (s *variant) Replace(ctx context.Context, key string, data []byte, ver cas.Version, ttl time.Duration) (bool, error) {
	if err := cmp.Or(s.refuse(key), ctx.Err()); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k, now := s.stored(key), time.Now()
	e := s.live(k, now)
	if s.revivesExpired {
		e = s.entries[k]
	}
	mask := ^cas.Version(0)
	if s.compareLowBits > 0 {
		mask = cas.Version(1)<<s.compareLowBits - 1
	}
	if e == nil || e.ver&mask != ver&mask {
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
	s.entries[k] = &ventry{data: s.keep(data), ver: s.version(k, data, e), created: e.created, expires: expires}
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
