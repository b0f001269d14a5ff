// Package cas runs bucket requests against any key-value store that offers
// compare-and-swap.
//
// A backend implements the narrow Store interface; the Executor adds the
// whole protocol on top: read, wire.Process, conditional write, retry with a
// retry.Strategy, request deadlines, expiration and recovery. A lost race and
// a failed store are different outcomes: only the first is retried.
//
// # Round trips
//
// Over the four methods of Store a check costs two round trips: a read and
// a compare-and-swap. A store that also implements the optional Writer or
// Batcher (below) reports the version each write produced; the Executor
// then remembers each bucket (WithMemory) and sends the next check on it
// straight to the compare-and-swap, one round trip, reading only after a
// lost race, and not even then when the store reports the winner. A store
// that implements Batcher carries the reads and writes of concurrent checks
// on different keys in shared round trips (WithPipelining), and concurrent
// checks on one key share one round of their own (see Executor.Execute):
// on Redis, 16 callers on 10,000 keys take 0.13 round trips per check
// (grid/redis, BenchmarkVersusLua). The memory never decides alone: what a
// compare-and-swap does not confirm is read first (see WithMemory).
//
// The Executor finds the extensions by type assertion, as database/sql
// finds a driver's. A store that wraps another by embedding its concrete
// type inherits the inner store's Writer and Batcher too, and those bypass
// the wrapper's Get, Insert and Replace: a wrapper that changes what those
// do embeds the Store interface instead, or implements the extensions
// itself.
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

// The optional extensions below let a store save round trips, in the manner
// of database/sql/driver's optional interfaces: the Executor checks for each
// with a type assertion when New is called and uses it instead of the four
// methods above. A store implements any, all or none of them; a wrapper
// (a decorator, a fault injector) hides them unless it implements them too.
// tck.RunStore puts every extension a store offers through the same
// contract and atomicity checks as the base methods.

// OpKind says what an Op does.
type OpKind uint8

// The operations of an Op.
const (
	// OpGet reads the key, as Get does.
	OpGet OpKind = iota + 1
	// OpInsert writes Op.Data if the key is absent, as Insert does.
	OpInsert
	// OpReplace writes Op.Data if the key holds version Op.Ver, as Replace
	// does.
	OpReplace
)

// Op is one store operation handed to a Writer or a Batcher: what to do,
// set by the Executor, and its outcome, set by the store in Result.
type Op struct {
	Kind OpKind
	Key  string
	// Data is the value an OpInsert or OpReplace writes. The store reads it
	// only, and keeps no reference to it once the call returns.
	Data []byte
	// Ver is the version an OpReplace compares.
	Ver Version
	// TTL is the expiry of the value an OpInsert or OpReplace writes, as
	// for Insert and Replace.
	TTL time.Duration

	Result Result
}

// Result is the outcome of an Op.
//
//   - OpGet: Found, Data and Ver report the key's value as Get would.
//   - A write that was applied: Written is true and Ver is the version of
//     the bytes written — the version a Get right after it would return.
//   - A write that lost the race: Written is false. When the store learnt,
//     in the same atomic step that refused the write, what the key holds
//     (a script that returns the value it compared, a find-and-modify),
//     Current is true and Found, Data and Ver report that value as Get
//     would. Otherwise Current is false and the other fields are zero: the
//     Executor reads the key again.
//   - Err is the operation's own failure, exactly as the matching method
//     would return it: an error, never a lost race, whose outcome is
//     unknown for a write. A key the store cannot hold is an error wrapping
//     core.ErrInvalidKey. With Err set the other fields are ignored.
//
// Data is the caller's: the store hands over a slice that nothing else
// refers to.
type Result struct {
	Err     error
	Written bool
	Current bool
	Found   bool
	Data    []byte
	Ver     Version
}

// Writer is an optional extension for a store whose conditional writes can
// report what they did in their own round trip: the version a write
// produced, and, where the store can, the value that won a lost race. It
// lets the Executor's memory (see WithMemory) try each compare-and-swap
// directly on the version the previous write produced, without a read; and
// a store that reports the winner of a lost race (Result.Current) makes
// even a lost race cost one round trip instead of two.
//
// Write performs op, an OpInsert or an OpReplace, under the rules of Insert
// and Replace (a lost race is Written false, never an error; an expired or
// deleted key's version always loses; a version never names other bytes
// later), and sets op.Result. It returns the error Insert or Replace would
// return, and then op.Result is ignored; op.Result.Err is not used.
type Writer interface {
	Write(ctx context.Context, op *Op) error
}

// Batcher is an optional extension for a store that can carry many
// operations, on different keys, in one round trip: a pipeline, a bulk
// call. The Executor then sends the reads and writes of concurrent requests
// on different keys together (see WithPipelining): while one batch is in
// flight, the operations that arrive queue up, and go together in the next.
//
// Batch performs every op of ops (OpGet, OpInsert or OpReplace, each on a
// key of its own: the Executor never puts two operations on one key in a
// batch) and sets each op's Result as Writer.Write and Get would, writes
// reporting the version written.
// Operations on distinct keys need not be atomic together: each is atomic
// on its own key, exactly as the single methods are. A failure of one
// operation (a key the store cannot hold, a server error for that key) is
// that op's Result.Err and leaves the others alone. Batch returns a non-nil
// error only when the batch as a whole failed and no op's outcome is known
// (the connection broke, ctx ended); the Executor then fails every op of
// the batch with it. Batch must honour ctx, which ends only once every
// operation's caller has given up.
type Batcher interface {
	Batch(ctx context.Context, ops []*Op) error
}
