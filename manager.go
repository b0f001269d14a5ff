package bucketgrid

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/core"
)

// ErrBucketNotFound is returned under RecoveryFail when a bucket that a
// handle had seen no longer exists (expired, removed, or lost by the store).
var ErrBucketNotFound = errors.New("bucketgrid: bucket not found")

// RecoveryStrategy says what a handle does when its bucket disappears.
type RecoveryStrategy uint8

const (
	// RecoveryReconstruct re-creates the bucket from the configuration
	// function, full (Bucket4j's RECONSTRUCT). The default.
	RecoveryReconstruct RecoveryStrategy = iota
	// RecoveryFail returns ErrBucketNotFound once the handle has seen the
	// bucket exist (Bucket4j's THROW_BUCKET_NOT_FOUND).
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
	exec     Executor
	recovery RecoveryStrategy
	expiry   core.Expiry
	listener Listener
	clock    clock.Clock
}

// ManagerOption configures a Manager.
type ManagerOption func(*Manager)

// WithRecovery sets the recovery strategy; the default reconstructs.
func WithRecovery(r RecoveryStrategy) ManagerOption { return func(m *Manager) { m.recovery = r } }

// WithExpiration sets the expiration-after-write policy for every write; the
// default is ExpireNever(). See ExpireFixed and ExpireAfterRefill.
func WithExpiration(e core.Expiry) ManagerOption { return func(m *Manager) { m.expiry = e } }

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
// storage holds only buckets that matter.
func ExpireAfterRefill(margin time.Duration) core.Expiry {
	return core.Expiry{Kind: core.ExpireAfterRefill, Margin: int64(margin)}
}

// NewManager returns a Manager over exec.
func NewManager(exec Executor, opts ...ManagerOption) *Manager {
	m := &Manager{exec: exec, listener: nopListener{}, clock: clock.Wall()}
	for _, o := range opts {
		o(m)
	}
	return m
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
	h := &Handle{m: m, key: key, configFn: configFn, listener: m.listener}
	for _, o := range opts {
		o(h)
	}
	return h
}

// RemoveBucket deletes key's bucket; removing an absent bucket is not an
// error.
func (m *Manager) RemoveBucket(ctx context.Context, key string) error {
	return m.exec.Remove(ctx, key)
}

// Configuration returns the stored configuration and its version, with
// found=false when the bucket does not exist. It never creates a bucket.
func (m *Manager) Configuration(ctx context.Context, key string) (cfg core.Config, version int64, found bool, err error) {
	resp, err := m.exec.Execute(ctx, key, core.Request{Ops: []core.Op{{Kind: core.OpGetConfiguration}}})
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
