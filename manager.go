package bucketgrid

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/core"
)

// ErrBucketNotFound is returned under RecoveryFail when a bucket that a
// handle had seen no longer exists (expired, removed, or lost by the store).
var ErrBucketNotFound = errors.New("bucketgrid: bucket not found")

// RecoveryStrategy says what a handle does when its bucket disappears or its
// stored record is corrupt.
type RecoveryStrategy uint8

const (
	// RecoveryReconstruct re-creates the bucket from the configuration
	// function, full (Bucket4j's RECONSTRUCT). The default. A stored record
	// that does not decode (core.StatusCorruptState) is replaced by a new
	// bucket too, with a compare-and-swap against the corrupt record (a valid
	// bucket written meanwhile is kept: see core.ModeReconstruct); each
	// replacement is counted in ManagerStats.CorruptReplaced and logged once
	// per key, redacted (see WithLogger). A bucket record of a newer format
	// is never replaced: it stays an error wrapping core.ErrCorruptState.
	RecoveryReconstruct RecoveryStrategy = iota
	// RecoveryFail returns ErrBucketNotFound once the handle has seen the
	// bucket exist (Bucket4j's THROW_BUCKET_NOT_FOUND), and an error
	// wrapping core.ErrCorruptState for a corrupt stored record. With
	// expiration (the default, see WithExpiration) a bucket left idle until
	// it expires counts as disappeared.
	RecoveryFail
)

// ConfigFunc returns the configuration of a bucket. The Manager calls it only
// when the storage answers that the bucket does not exist (or, with implicit
// replacement, that its stored configuration is older than wanted), so it may
// be expensive: a database lookup of the client's plan, say.
type ConfigFunc func(ctx context.Context) (core.Config, error)

// Manager hands out distributed buckets stored through an Executor. It is
// safe for concurrent use; handles are cheap.
type Manager struct {
	exec      Executor
	recovery  RecoveryStrategy
	expiry    core.Expiry
	expirySet bool // WithExpiration was given
	listener  Listener
	clock     clock.Clock
	fitKeys   int // WithFitKeys's maxLen; 0: keys go to the executor as they are
	corrupt   corruptLog
}

// ManagerOption configures a Manager.
type ManagerOption func(*Manager)

// WithRecovery sets the recovery strategy; the default reconstructs.
func WithRecovery(r RecoveryStrategy) ManagerOption { return func(m *Manager) { m.recovery = r } }

// WithExpiration sets the expiration-after-write policy for every write; the
// default is ExpireAfterRefill(DefaultExpiryMargin), which is always safe: a
// bucket expires only once it is full again (plus the margin), and a new
// one holds the same tokens (an intervally refill restarts its interval, so
// it refills later, never sooner). Pass ExpireNever() to keep buckets until
// removed, or see ExpireFixed.
func WithExpiration(e core.Expiry) ManagerOption {
	return func(m *Manager) { m.expiry, m.expirySet = e, true }
}

// DefaultExpiryMargin is the margin of a Manager's default expiration,
// ExpireAfterRefill(DefaultExpiryMargin): storage holds an idle client's
// bucket one minute past the moment it is full again. The margin covers
// clock skew between the clients of a store and stores' TTL rounding (whole
// seconds on Couchbase) with room to spare, and costs only that minute of
// storage.
const DefaultExpiryMargin = time.Minute

// WithFitKeys maps every key through core.FitKey(key, maxLen) before it
// reaches the executor: a key longer than maxLen bytes, not valid UTF-8, or
// starting with core.DigestMarker ('#') is replaced by its digest
// (core.DigestKey, 44 bytes of ASCII), every other key is kept as it is. No
// two keys share a bucket (short of a SHA-256 collision): digests live in a
// namespace of their own, which no literal key can reach.
//
// Turn it on when clients choose keys (API keys, header values) and the
// backend has a key rule, with the backend's limit for the key as the
// executor receives it: for Couchbase, 250 bytes minus the prefix the
// store's key mapping adds (couchbase.MaxKeyLen - len(prefix)); for MongoDB,
// mongo.MaxKeyLen. Without it such keys are refused with an error wrapping
// ErrInvalidKey (an HTTP middleware answers 400). Turning it on later moves
// the keys it changes (long, non-UTF-8 or '#'-prefixed ones) to new, full
// buckets. Handle.Key still returns the key as given.
//
// NewManager panics when maxLen < core.DigestKeyLen, a limit no digest fits:
// backends' limits are constants, so the first test catches it.
func WithFitKeys(maxLen int) ManagerOption {
	return func(m *Manager) {
		if maxLen < core.DigestKeyLen {
			panic(fmt.Sprintf("bucketgrid: WithFitKeys(%d): below core.DigestKeyLen (%d), no digest fits", maxLen, core.DigestKeyLen))
		}
		m.fitKeys = maxLen
	}
}

// WithLogger sets where a Manager logs the events it must not handle
// silently (a corrupt record replaced, once per key, the key redacted); the
// default is slog.Default().
func WithLogger(l *slog.Logger) ManagerOption { return func(m *Manager) { m.corrupt.logger = l } }

// WithManagerListener sets the client-side listener of every handle that
// does not set its own.
func WithManagerListener(l Listener) ManagerOption { return func(m *Manager) { m.listener = l } }

// WithManagerClock sets the clock the blocking operations wait on with
// clock.Sleep (a *clock.Fake makes them return at once); the default is
// clock.Wall(). Bucket time itself always comes from the executing side.
func WithManagerClock(c clock.Clock) ManagerOption { return func(m *Manager) { m.clock = c } }

// ExpireNever keeps buckets until removed.
func ExpireNever() core.Expiry { return core.Expiry{} }

// ExpireFixed expires a bucket ttl after its last write.
func ExpireFixed(ttl time.Duration) core.Expiry {
	return core.Expiry{Kind: core.ExpireFixed, Fixed: int64(ttl)}
}

// ExpireAfterRefill expires a bucket margin after the moment it would be full
// again: from then on an expired bucket and a new one are the same, so
// storage holds only buckets that matter. A bucket whose configuration
// starts a bandwidth above its capacity (core.Bandwidth.WithInitialTokens)
// is written without expiry, since a new one would hold more than a full
// one.
func ExpireAfterRefill(margin time.Duration) core.Expiry {
	return core.Expiry{Kind: core.ExpireAfterRefill, Margin: int64(margin)}
}

// NewManager returns a Manager over exec.
func NewManager(exec Executor, opts ...ManagerOption) *Manager {
	m := &Manager{exec: exec, listener: nopListener{}, clock: clock.Wall()}
	for _, o := range opts {
		o(m)
	}
	if !m.expirySet {
		m.expiry = ExpireAfterRefill(DefaultExpiryMargin)
	}
	if m.corrupt.logger == nil {
		m.corrupt.logger = slog.Default()
	}
	return m
}

// storeKey returns the key the executor stores key's bucket under.
func (m *Manager) storeKey(key string) string {
	if m.fitKeys == 0 {
		return key
	}
	k, _ := core.FitKey(key, m.fitKeys)
	return k
}

// BucketOption configures one handle.
type BucketOption func(*Handle)

// WithConfigVersion enables implicit configuration replacement: when the
// stored configuration's version is below version, the configuration function
// runs and its result replaces the stored one, carrying tokens over by
// strategy. A stored version is never lowered, so handles with an older
// version keep using the newer configuration.
func WithConfigVersion(version int64, strategy core.TokensInheritance) BucketOption {
	return func(h *Handle) { h.version, h.inherit = version, strategy }
}

// WithListener sets the handle's listener.
func WithListener(l Listener) BucketOption { return func(h *Handle) { h.listener = l } }

// Bucket returns a handle to key's bucket. Nothing is read or written until
// the first operation; configFn runs only when the bucket must be created or
// its configuration replaced.
func (m *Manager) Bucket(key string, configFn ConfigFunc, opts ...BucketOption) *Handle {
	h := &Handle{m: m, key: key, storeKey: m.storeKey(key), configFn: configFn, listener: m.listener}
	for _, o := range opts {
		o(h)
	}
	return h
}

// RemoveBucket deletes key's bucket; removing an absent bucket is not an
// error.
func (m *Manager) RemoveBucket(ctx context.Context, key string) error {
	return m.exec.Remove(ctx, m.storeKey(key))
}

// Configuration returns the stored configuration and its version, with
// found=false when the bucket does not exist. It never creates a bucket.
func (m *Manager) Configuration(ctx context.Context, key string) (cfg core.Config, version int64, found bool, err error) {
	resp, err := m.exec.Execute(ctx, m.storeKey(key), core.Request{Ops: []core.Op{{Kind: core.OpGetConfiguration}}})
	if err != nil {
		return core.Config{}, 0, false, err
	}
	switch {
	case resp.Status == core.StatusNotFound:
		return core.Config{}, 0, false, nil
	case resp.Err() != nil:
		return core.Config{}, 0, false, resp.Err()
	case resp.Diagnostics == nil:
		return core.Config{}, 0, false, fmt.Errorf("bucketgrid: executor answered without diagnostics")
	}
	b := resp.Diagnostics.Bucket
	return b.Config, b.ConfigVersion, true, nil
}
