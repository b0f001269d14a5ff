// Package cas runs bucket requests against any key-value store that offers
// compare-and-swap.
//
// A backend implements the narrow Store interface; the Executor adds the
// whole protocol on top: read, core.Process, conditional write, retry with a
// retry.Strategy, request deadlines, expiration and recovery. A lost race and
// a failed store are different outcomes: only the first is retried.
package cas

import (
	"context"
	"errors"
	"time"
)

// Version is the opaque token a Store hands out with every read and checks on
// every Replace. Stores whose native token is not an integer (an ETag, say)
// keep their own mapping; the executor only compares it for equality by
// passing it back.
type Version uint64

// Store is the service provider interface a backend implements. Every method
// may block and must honour ctx.
//
// The contract, checked by tck.RunStore (see KeyChecker for keys a store
// cannot hold):
//   - Get returns found=false for a key that is absent or whose TTL has
//     passed. A found value comes with the Version that Replace will compare.
//   - Insert writes only when the key is absent (an expired key counts as
//     absent). It reports ok=false, err=nil when the key already exists: a lost
//     race.
//   - Replace writes only when the stored Version still equals ver. It reports
//     ok=false, err=nil when the version differs or the key has gone: a lost
//     race.
//   - Every other failure (network, timeout, server error) is returned as a
//     non-nil error, never as ok=false. A key the store cannot hold is an
//     error wrapping core.ErrInvalidKey, returned before any I/O.
//   - A positive ttl makes the written value expire after ttl; zero means no
//     expiry. Every write sets the TTL anew.
type Store interface {
	Get(ctx context.Context, key string) (data []byte, ver Version, found bool, err error)
	Insert(ctx context.Context, key string, data []byte, ttl time.Duration) (ok bool, err error)
	Replace(ctx context.Context, key string, data []byte, ver Version, ttl time.Duration) (ok bool, err error)
	Delete(ctx context.Context, key string) error
}

// KeyChecker is implemented by a Store that cannot hold every key: a length
// limit, an encoding rule. CheckKey returns nil for a key the store can
// hold, and otherwise an error wrapping core.ErrInvalidKey (build it with
// core.InvalidKey, which never prints the key). It must do no I/O and be
// safe for concurrent use.
//
// The Executor calls CheckKey once per Execute and Remove, before it queues
// the request or touches the store, and returns its error as is: the key is
// the client's error, so it is not wrapped in ErrStore, not retried, and not
// counted as a store failure. A Store that implements KeyChecker should still
// refuse such keys in every method, with the same error and before any I/O,
// because it may be called directly or through a wrapper that hides
// CheckKey; the Executor passes any error wrapping core.ErrInvalidKey
// through in the same way, whichever method returns it. A Store without a
// key rule (memstore) does not implement KeyChecker.
type KeyChecker interface {
	CheckKey(key string) error
}

// ErrStore marks errors that came from the Store rather than from the
// protocol. The executor wraps every store failure with it, so callers can
// test errors.Is(err, cas.ErrStore) to tell an outage from a rejected request.
var ErrStore = errors.New("cas: store failed")
