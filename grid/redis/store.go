// Package redis is a cas.Store on Redis, through go-redis
// (github.com/redis/go-redis/v9): four methods over an existing client,
// about a hundred lines that matter, and one call to tck.RunStore to prove
// it. It is also the worked example of examples/newbackend, the template
// for any store that offers a compare-and-set; the optional extensions that
// make it fast (cas.Writer, cas.Batcher) live apart, in batch.go.
//
// # Layout
//
// Each bucket is one Redis string: 8 bytes of version, big-endian, then the
// bucket state exactly as bucketgrid handed it over. Value and version live in
// one key so that a single GET reads both consistently and a single SET writes
// both; a hash {v, n} works as well, but costs HMGET/HSET plus a separate
// PEXPIRE and cannot be created if-absent in one command. The state is opaque
// binary: never interpret it, never re-encode it, just store the bytes.
//
// # Versions
//
// Every write stores a fresh random 64-bit version chosen by the client
// (never equal to the one it replaces). Random rather than a per-key counter
// for two reasons:
//   - A deleted or expired bucket that is created again does not restart at
//     a version a slow client may still hold (the ABA problem): that client's
//     Replace loses as it must.
//   - The version identifies the write itself, so a write that go-redis
//     resends after a lost reply (it retries on a dropped connection) finds
//     its own version in place and answers "written", instead of "lost race",
//     which would make the executor charge the request a second time.
//
// # Atomicity
//
// Insert and Replace are one Lua script (casScript). Redis runs a script
// without interleaving any other command, so "compare the version, then
// write" is atomic. A write that loses returns the value that won, read in
// the same step, so the executor's next attempt needs no read (see
// cas.Writer). The script is loaded once and called by its SHA1 digest
// (EVALSHA); when the server has lost it (restart, failover, SCRIPT FLUSH,
// eviction) the answer is NOSCRIPT and the store sends the source with EVAL,
// which runs it and caches it again. Get is a plain GET and Delete a plain
// DEL: single commands are atomic already.
//
// The script touches only KEYS[1], so it runs unchanged on Redis Cluster and
// behind a Ring: the client routes it by the key.
//
// # Errors
//
// ok=false with a nil error means exactly one thing: the compare failed, the
// store is fine, another writer won. Everything else — a refused connection,
// a timeout, a cancelled context, a script error, a key of the wrong type —
// is returned as an error, so the executor reports an outage instead of
// retrying it as contention. A lost reply is an error too: the outcome of
// that write is unknown, and only the caller may decide about it.
//
// # Expiry
//
// A positive TTL becomes SET … PX, rounded up to whole milliseconds (Redis's
// resolution: never expire earlier than asked, and a sub-millisecond TTL must
// not turn into "no expiry"). TTL 0 is a SET without PX, which also removes
// any expiry the key had: every write sets the TTL anew. Redis itself treats
// an expired key as absent for every command, so Get and Insert need no
// expiry logic of their own.
//
// # Keys
//
// Redis keys are binary-safe up to 512 MB, so the store's rule is its own:
// a Redis key (the prefix and the bucket key) of at most MaxKeyLen (1024)
// bytes, any bytes. A client-chosen key longer than that is not a name but
// an attempt to make Redis hold megabytes per bucket. A key that breaks the
// rule is refused before any command is sent, by CheckKey (the optional
// cas.KeyChecker, which the executor calls once per request) and by every
// method (for callers that bypass the executor), with a *core.KeyError that
// never shows the key: the client's error, not an outage. This is the
// pattern for any store with a key rule: state it, check it without I/O,
// return core.InvalidKey.
//
// # Round trips
//
// Through cas.Executor a check costs one round trip: the executor
// remembers the version each write produced (the store reports it, see
// cas.Writer) and sends the next check on the key straight to the script,
// without a GET; a lost race returns the winner, so it costs no extra
// read. Concurrent checks on different keys share round trips: the store
// is a cas.Batcher, and the executor pipelines the scripts and reads of
// concurrent rounds in one go-redis pipeline while another is in flight,
// as rueidis does for single commands. README.md has the measurements
// beside the Redis + Lua token bucket.
//
// # Consistency
//
// Redis replicates asynchronously: after a failover the new primary may miss
// the last writes, so a bucket can briefly hold more tokens than it should.
// The compare-and-set itself stays atomic. Use WAIT, or accept the bound.
package redis

import (
	"context"
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/core"
)

// casScript writes ARGV[2] (version and state) to KEYS[1] if the stored
// version is ARGV[1], or, when ARGV[1] is empty, if the key is absent. ARGV[3]
// is the TTL in milliseconds, "0" for none. It returns 1 when the value is
// written — also when it finds this very write already there (a resend).
// When another writer won it returns what the key holds: its value
// (version and state), or 0 when the key is absent.
const casScript = `
local cur = redis.call('GET', KEYS[1])
if cur then
  local ver = string.sub(cur, 1, 8)
  if ver == string.sub(ARGV[2], 1, 8) then
    return 1
  end
  if ver ~= ARGV[1] then
    return cur
  end
elseif ARGV[1] ~= '' then
  return 0
end
if ARGV[3] == '0' then
  redis.call('SET', KEYS[1], ARGV[2])
else
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
end
return 1
`

// casSHA is the script's digest, computed here rather than asked of the
// server, so that New does no I/O and cannot fail.
var casSHA = func() string {
	h := sha1.Sum([]byte(casScript))
	return hex.EncodeToString(h[:])
}()

const versionLen = 8

// ErrCorrupt is returned for a key that holds a value this store did not
// write (shorter than a version, or not a string at all): a key-prefix
// clash with another application, most likely. It is an error, not
// "absent", so the bucket is not silently recreated over someone else's
// data; and it wraps core.ErrCorruptState, so that it is never taken for an
// outage (httplimit refuses the request whatever its failure mode) until
// the key is removed.
var ErrCorrupt = fmt.Errorf("grid/redis: value not written by grid/redis: %w", core.ErrCorruptState)

// foreign wraps err in ErrCorrupt when Redis refused the command because
// the key holds another type (WRONGTYPE, alone or inside a script error).
func foreign(err error) error {
	if err != nil && strings.Contains(err.Error(), "WRONGTYPE") {
		return fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return err
}

// Client is the part of go-redis the store uses. *redis.Client,
// *redis.ClusterClient, *redis.Ring and redis.UniversalClient satisfy it.
type Client interface {
	Get(ctx context.Context, key string) *goredis.StringCmd
	Del(ctx context.Context, keys ...string) *goredis.IntCmd
	EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *goredis.Cmd
	Eval(ctx context.Context, script string, keys []string, args ...any) *goredis.Cmd
	ScriptLoad(ctx context.Context, script string) *goredis.StringCmd
	Pipelined(ctx context.Context, fn func(goredis.Pipeliner) error) ([]goredis.Cmder, error)
}

// Store is a cas.Store on Redis. It is safe for concurrent use; it holds no
// connection of its own, so closing the client is the caller's business.
type Store struct {
	c         Client
	prefix    string
	fallbacks atomic.Int64 // EVALSHA answered NOSCRIPT and EVAL ran instead
}

var (
	_ cas.Store      = (*Store)(nil)
	_ cas.KeyChecker = (*Store)(nil)
	_ cas.Writer     = (*Store)(nil)
	_ cas.Batcher    = (*Store)(nil)
)

// MaxKeyLen is the longest Redis key the store touches, prefix included, in
// bytes (see Keys in the package documentation).
const MaxKeyLen = 1024

// CheckKey reports whether the store holds key: nil, or a *core.KeyError
// when the prefix and key exceed MaxKeyLen bytes. It does no I/O.
func (s *Store) CheckKey(key string) error {
	if n := len(s.prefix) + len(key); n > MaxKeyLen {
		return core.InvalidKey(key, fmt.Sprintf("makes a Redis key of %d bytes, longer than %d", n, MaxKeyLen))
	}
	return nil
}

// Option configures a Store.
type Option func(*Store)

// WithPrefix sets the prefix of every Redis key the store touches; the
// default is "bucketgrid:". Give each application (and each test run) its
// own, so that keys never clash and can be found with SCAN MATCH prefix*.
func WithPrefix(prefix string) Option { return func(s *Store) { s.prefix = prefix } }

// New returns a store over c. It does no I/O: the script is sent on first
// use (or by Load). Configure c with ContextTimeoutEnabled: true so that a
// request's context deadline bounds every call even when Redis hangs;
// otherwise go-redis waits up to its own ReadTimeout.
func New(c Client, opts ...Option) *Store {
	s := &Store{c: c, prefix: "bucketgrid:"}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Load sends the compare-and-set script with SCRIPT LOAD. It is optional — a
// store whose script is missing falls back to EVAL on its own — but calling
// it at start-up checks the connection early, and recent Redis versions
// evict scripts cached by EVAL (least recently used first) but keep those
// loaded with SCRIPT LOAD.
func (s *Store) Load(ctx context.Context) error {
	sha, err := s.c.ScriptLoad(ctx, casScript).Result()
	if err != nil {
		return fmt.Errorf("grid/redis: SCRIPT LOAD: %w", err)
	}
	if sha != casSHA {
		return fmt.Errorf("grid/redis: SCRIPT LOAD returned digest %s, want %s", sha, casSHA)
	}
	return nil
}

// Get returns key's state and version; a missing or expired key is
// found=false with a nil error. The returned slice is the caller's: go-redis
// hands over a fresh copy of the reply.
func (s *Store) Get(ctx context.Context, key string) ([]byte, cas.Version, bool, error) {
	if err := s.CheckKey(key); err != nil {
		return nil, 0, false, err
	}
	b, err := s.c.Get(ctx, s.prefix+key).Bytes()
	if errors.Is(err, goredis.Nil) {
		return nil, 0, false, nil
	}
	if err != nil {
		return nil, 0, false, foreign(err)
	}
	data, ver, err := s.decode(key, b)
	if err != nil {
		return nil, 0, false, err
	}
	return data, ver, true, nil
}

// decode splits a stored value into state and version.
func (s *Store) decode(key string, b []byte) ([]byte, cas.Version, error) {
	if len(b) < versionLen {
		return nil, 0, fmt.Errorf("%w: key %s holds %d bytes", ErrCorrupt, core.RedactKey(s.prefix+key), len(b))
	}
	return b[versionLen:], cas.Version(binary.BigEndian.Uint64(b)), nil
}

// Insert writes data if key is absent (or expired). ok=false, err=nil means
// the key exists: another client created it first.
func (s *Store) Insert(ctx context.Context, key string, data []byte, ttl time.Duration) (bool, error) {
	op := cas.Op{Kind: cas.OpInsert, Key: key, Data: data, TTL: ttl}
	err := s.writeAs(ctx, &op, newVersion(0))
	return op.Result.Written, err
}

// Replace writes data if key's version is still ver. ok=false, err=nil means
// it changed or the key has gone: a lost race.
func (s *Store) Replace(ctx context.Context, key string, data []byte, ver cas.Version, ttl time.Duration) (bool, error) {
	op := cas.Op{Kind: cas.OpReplace, Key: key, Data: data, Ver: ver, TTL: ttl}
	err := s.writeAs(ctx, &op, newVersion(ver))
	return op.Result.Written, err
}

// writeAs runs casScript for op, storing version ver if it wins, and sets
// op.Result: written, or lost with the value that won.
func (s *Store) writeAs(ctx context.Context, op *cas.Op, ver cas.Version) error {
	w, err := s.prepare(op, ver)
	if err != nil {
		return err
	}
	reply, err := s.c.EvalSha(ctx, casSHA, w.keys, w.args...).Result()
	if isNoScript(err) {
		// The script did not run, so sending it again is safe.
		s.fallbacks.Add(1)
		reply, err = s.c.Eval(ctx, casScript, w.keys, w.args...).Result()
	}
	if err != nil {
		return foreign(err)
	}
	return s.result(op, w, reply)
}

// Delete removes key; deleting an absent key is not an error.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := s.CheckKey(key); err != nil {
		return err
	}
	return s.c.Del(ctx, s.prefix+key).Err()
}

// newVersion returns a random version other than old (and other than 0, so a
// zero Version never names a stored value).
func newVersion(old cas.Version) cas.Version {
	for {
		if v := cas.Version(rand.Uint64()); v != old && v != 0 {
			return v
		}
	}
}

// write is one compare-and-set: the script's keys and arguments for op,
// with the version the write will store if it wins.
type write struct {
	keys []string
	args []any
	ver  cas.Version
}

// prepare checks op's key and builds its script call, which writes version
// ver if it wins.
func (s *Store) prepare(op *cas.Op, ver cas.Version) (write, error) {
	if err := s.CheckKey(op.Key); err != nil {
		return write{}, err
	}
	expected := ""
	switch op.Kind {
	case cas.OpInsert:
	case cas.OpReplace:
		var b [versionLen]byte
		binary.BigEndian.PutUint64(b[:], uint64(op.Ver))
		expected = string(b[:])
	default:
		return write{}, errors.New("grid/redis: not a write: operation " + strconv.Itoa(int(op.Kind)))
	}
	val := make([]byte, versionLen+len(op.Data))
	binary.BigEndian.PutUint64(val, uint64(ver))
	copy(val[versionLen:], op.Data)
	return write{keys: []string{s.prefix + op.Key}, args: []any{expected, val, ttlMillis(op.TTL)}, ver: ver}, nil
}

// result sets op's outcome from the script's reply to w.
func (s *Store) result(op *cas.Op, w write, reply any) error {
	r := &op.Result
	*r = cas.Result{Current: true}
	switch v := reply.(type) {
	case int64:
		switch v {
		case 1:
			*r = cas.Result{Written: true, Ver: w.ver}
		case 0: // lost: the key is absent
		default:
			return fmt.Errorf("grid/redis: script answered %d, want 0, 1 or a value", v)
		}
	case string:
		data, ver, err := s.decode(op.Key, []byte(v))
		if err != nil {
			return err
		}
		r.Found, r.Data, r.Ver = true, data, ver
	default:
		return fmt.Errorf("grid/redis: script answered a %T", reply)
	}
	return nil
}
func isNoScript(err error) bool {
	return errors.Is(err, goredis.ErrNoScript) || goredis.HasErrorPrefix(err, "NOSCRIPT")
}

// ttlMillis converts a TTL to whole milliseconds, rounding up; 0 stays 0
// (no expiry).
func ttlMillis(ttl time.Duration) int64 {
	if ttl <= 0 {
		return 0
	}
	return int64((ttl + time.Millisecond - 1) / time.Millisecond)
}
