package bucketgrid

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/core/wire"
)

// ErrBucketNotFound is returned under WithRecoveryFail when a bucket that a
// handle had seen no longer exists (expired, removed, or lost by the store).
var ErrBucketNotFound = errors.New("bucketgrid: bucket not found")

// configFunc returns the configuration of a bucket (see Manager.Bucket).
type configFunc = func(ctx context.Context) (core.Config, error)

// Manager hands out distributed buckets stored through an Executor. It is
// safe for concurrent use; handles are cheap.
type Manager struct {
	exec     Executor
	failLost bool // WithRecoveryFail; false: re-create (see there)
	expiry   wire.Expiry
	listener Listener
	clock    clock.Clock
	fitKeys  int  // WithFitKeys's maxLen; 0: keys go to the executor as they are
	eager    bool // WithEagerConfig: every request carries the configuration
	corrupt  corruptLog
	degrade  *degrader // WithDegrade; nil: executor errors are returned
}

// defaultExpiryMargin is the margin of a Manager's default expiration,
// ExpireAfterRefill(time.Minute): storage holds an idle client's bucket one
// minute past the moment it is full again. The margin covers clock skew
// between the clients of a store and stores' TTL rounding (whole seconds on
// Couchbase) with room to spare, and costs only that minute of storage.
const defaultExpiryMargin = time.Minute

// ExpireAfterRefill expires a bucket margin after the moment it would be full
// again: from then on an expired bucket and a new one are the same, so
// storage holds only buckets that matter. A bucket whose configuration
// starts a bandwidth above its capacity (core.Bandwidth.WithInitialTokens)
// is written without expiry, since a new one would hold more than a full
// one.
func ExpireAfterRefill(margin time.Duration) wire.Expiry {
	return wire.Expiry{Kind: wire.ExpireAfterRefill, Margin: int64(margin)}
}

// NewManager returns a Manager over exec. It takes the options WithClock
// (the clock blocking calls wait on, and the local buckets of WithDegrade
// run on), WithListener (the default listener of handles), WithRecoveryFail,
// WithExpiration, WithFitKeys, WithLogger, WithEagerConfig and WithDegrade.
func NewManager(exec Executor, opts ...ManagerOption) *Manager {
	o := collect(opts, ManagerOption.applyManager)
	m := &Manager{exec: exec, failLost: o.failLost, expiry: o.expiry, listener: o.listener, clock: o.clock,
		fitKeys: o.fitKeys, eager: o.set&optEagerConfig != 0}
	m.corrupt.logger = o.logger
	if m.listener == nil {
		m.listener = nopListener{}
	}
	if m.clock == nil {
		m.clock = clock.Wall()
	}
	if o.set&optExpiration == 0 {
		m.expiry = ExpireAfterRefill(defaultExpiryMargin)
	}
	if m.corrupt.logger == nil {
		m.corrupt.logger = slog.Default()
	}
	if o.set&optDegrade != 0 {
		m.degrade = newDegrader(m, o.degrade)
	}
	return m
}

// Degraded returns a Manager over the same executor, with the same options,
// whose degraded mode is d (see WithDegrade): for a front door handed a
// Manager, such as an HTTP middleware's option. Its breakers and local
// buckets are its own.
func (m *Manager) Degraded(d Degrade) *Manager {
	n := &Manager{exec: m.exec, failLost: m.failLost, expiry: m.expiry, listener: m.listener, clock: m.clock,
		fitKeys: m.fitKeys, eager: m.eager}
	n.corrupt.logger = m.corrupt.logger
	n.degrade = newDegrader(n, d)
	return n
}

// Close stops the background work of the Manager's degraded mode (see
// Degrade): the probing of open breakers and of keys whose local
// consumption is still to be charged. Without it, that work ends by itself
// once no breaker is open and nothing is left to charge. The Manager keeps
// answering after Close, its requests probing and charging as they come;
// the executor is not closed. Closing again does nothing; it returns nil.
func (m *Manager) Close() error {
	if m.degrade != nil {
		m.degrade.close()
	}
	return nil
}

// storeKey returns the key the executor stores key's bucket under.
func (m *Manager) storeKey(key string) string {
	if m.fitKeys == 0 {
		return key
	}
	k, _ := core.FitKey(key, m.fitKeys)
	return k
}

// Bucket returns a handle to key's bucket. Nothing is read or written until
// the first operation. configFn returns the bucket's configuration; the
// handle calls it only when the storage answers that the bucket does not
// exist (or, with WithConfigVersion, that its stored configuration is older
// than wanted), so it may be expensive: a database lookup of the client's
// plan, say. Under WithEagerConfig it is called before every operation
// instead. It takes the options WithClock and WithListener (replacing the
// Manager's) and WithConfigVersion.
func (m *Manager) Bucket(key string, configFn func(ctx context.Context) (core.Config, error), opts ...HandleOption) *Handle {
	h := &Handle{m: m, key: key, storeKey: m.storeKey(key), configFn: configFn, listener: m.listener, clock: m.clock}
	if len(opts) > 0 {
		o := collect(opts, HandleOption.applyHandle)
		if o.set&optClock != 0 && o.clock != nil {
			h.clock = o.clock
		}
		if o.set&optListener != 0 {
			h.listener = o.listener
			if h.listener == nil {
				h.listener = nopListener{}
			}
		}
		h.version, h.inherit = o.version, o.inherit
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
	resp, err := m.exec.Execute(ctx, m.storeKey(key), wire.Request{Ops: []wire.Op{{Kind: wire.OpGetConfiguration}}})
	if err != nil {
		return core.Config{}, 0, false, err
	}
	switch {
	case resp.Status == wire.StatusNotFound:
		return core.Config{}, 0, false, nil
	case resp.Err() != nil:
		return core.Config{}, 0, false, resp.Err()
	case resp.Diagnostics == nil:
		return core.Config{}, 0, false, fmt.Errorf("bucketgrid: executor answered without diagnostics")
	}
	b := resp.Diagnostics.State
	return b.Config, b.ConfigVersion, true, nil
}
