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
// every Replace; the executor only passes it back.
//
// The rule, which tck.RunStore checks before anything else: a version names
// the stored bytes. Replace(key, data, ver) may write only while key holds
// exactly the bytes that Get returned with ver. Hence:
//   - a write that changes the bytes changes the version;
//   - a version never names other bytes later, for the same key — across a
//     Delete and an expiry too (the ABA problem: a client that read a
//     bucket, stalled, and replaces with the old version must lose against
//     the bucket created since);
//   - Replace compares the whole 64 bits.
//
// Two kinds of version satisfy it. A write identity changes on every
// successful Insert and Replace and never repeats for a key while a client
// may still hold it: a global counter, the store's own revision or CAS, a
// random 64-bit value chosen per write (a per-key counter that restarts at 1
// does not). A digest of the value (an ETag: 64 bits of a cryptographic hash
// of the bytes) is equal for equal bytes, so a Replace that wins with a
// version read before other writes computes exactly what a fresh read
// would: bucket checks are pure functions of the stored bytes. A TTL need
// not be part of a version: every write sets its own.
type Version uint64

// Store is the service provider interface a backend implements. Every method
// may block and must honour ctx.
//
// The contract, checked by tck.RunStore (see KeyChecker for keys a store
// cannot hold):
//   - Get returns found=false, err=nil only for a key that is absent or whose
//     TTL has passed; a read that cannot tell (a timeout, a replica behind)
//     is an error, never "absent". A found value comes with the Version that
//     Replace will compare (see Version).
//   - Insert writes only when the key is absent (an expired key counts as
//     absent). It reports ok=false, err=nil when the key already exists: a lost
//     race.
//   - Replace writes only when the stored Version still equals ver and the
//     value has not expired. It reports ok=false, err=nil when the version
//     differs or the key has gone (deleted or expired): a lost race. An
//     expired value never comes back.
//   - ok=false, err=nil means exactly that nothing was written. A write that
//     was applied reports ok=true; one whose outcome is unknown (a lost reply)
//     returns an error. Every other failure (network, timeout, server error)
//     is a non-nil error, never ok=false.
//   - Delete removes exactly the key it names (never keys sharing a prefix);
//     deleting an absent key is not an error.
//   - Keys are byte strings: distinct keys are distinct entries, whatever
//     their case, whitespace, Unicode form, NUL or non-UTF-8 bytes or length.
//     A store may refuse a key it cannot hold (too long, not UTF-8) with an
//     error wrapping core.ErrInvalidKey, from every method and before any
//     I/O; it never truncates, folds or rewrites one.
//   - Values are opaque binary: Get returns the bytes written, trailing zero
//     bytes included, in a slice the caller owns and that no later call
//     changes; Insert and Replace keep no reference to data once they return.
//   - A positive ttl makes the written value expire ttl after the write — never
//     earlier, and later only by the store's resolution; zero means no expiry.
//     Every write, Replace included, sets the TTL anew and counts it from that
//     write. A TTL is a duration whatever its length: over 30 days too
//     (memcached's protocol reads such an expiry as a Unix time).
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
