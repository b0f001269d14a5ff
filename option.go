package bucketgrid

import (
	"fmt"
	"log/slog"

	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/core/wire"
)

// The option types: one per constructor that takes options of its own, so
// that the compiler refuses an option given to a constructor that does not
// take it, and Option, which every constructor takes.
type (
	// ManagerOption configures NewManager: WithClock, WithListener,
	// WithRecoveryFail, WithExpiration, WithFitKeys, WithLogger,
	// WithEagerConfig, WithDegrade.
	ManagerOption interface{ applyManager(*options) }
	// HandleOption configures one handle (Manager.Bucket): WithClock,
	// WithListener, WithConfigVersion.
	HandleOption interface{ applyHandle(*options) }
	// Option is an option of every constructor alike (WithClock,
	// WithListener), so that it means the same thing wherever it is
	// passed: the only options of NewLocal and NewLocalGroup.
	Option interface {
		ManagerOption
		HandleOption
		applyLocal(*options)
	}
)

// The concrete options, one type for each set of constructors that take an
// option.
type (
	commonOption  func(*options) // every constructor
	managerOption func(*options) // NewManager
	handleOption  func(*options) // Manager.Bucket
)

func (f commonOption) applyLocal(o *options)    { f(o) }
func (f commonOption) applyManager(o *options)  { f(o) }
func (f commonOption) applyHandle(o *options)   { f(o) }
func (f managerOption) applyManager(o *options) { f(o) }
func (f handleOption) applyHandle(o *options)   { f(o) }

// options is what the options set; set records which were given.
type options struct {
	set      optionSet
	clock    clock.Clock
	listener Listener
	failLost bool
	expiry   wire.Expiry
	version  int64
	inherit  core.TokensInheritance
	fitKeys  int
	logger   *slog.Logger
	degrade  Degrade
}

// optionSet is a set of options, one bit each.
type optionSet uint16

const (
	optClock optionSet = 1 << iota
	optListener
	optRecovery
	optExpiration
	optConfigVersion
	optFitKeys
	optLogger
	optEagerConfig
	optDegrade
)

// collect applies opts, each with apply, over the defaults.
func collect[O any](opts []O, apply func(O, *options)) options {
	var o options
	for _, opt := range opts {
		apply(opt, &o)
	}
	return o
}

// WithClock makes buckets tell time by c (NewLocal, NewLocalGroup; default
// clock.Monotonic()), or sets the clock blocking calls wait on (NewManager:
// every handle's, default clock.Wall(); Manager.Bucket: that handle's, the
// Manager's when nil). Distributed bucket time always comes from the side
// that executes the request. Aligned refill styles need a
// clock whose Wall method reports true, such as clock.Wall(),
// clock.WallMillis() or a *clock.Fake. Blocking calls wait with clock.Sleep
// on c, so a clock.Sleeper such as *clock.Fake controls them: its waits
// return at once. A nil c selects the default.
func WithClock(c clock.Clock) Option {
	return commonOption(func(o *options) { o.set |= optClock; o.clock = c })
}

// WithListener makes buckets report their events to l (NewLocal,
// NewLocalGroup: every bucket of the group; NewManager: every handle that does
// not set its own; Manager.Bucket: that handle). A nil l reports nothing,
// the default. See Listener for when each event is reported.
func WithListener(l Listener) Option {
	return commonOption(func(o *options) { o.set |= optListener; o.listener = l })
}

// WithRecoveryFail makes a Manager's handles (NewManager) fail when their
// bucket disappears or its stored record is corrupt, rather than re-create
// it (the default, Bucket4j's RECONSTRUCT): an operation returns
// ErrBucketNotFound once the handle has seen the bucket exist (Bucket4j's
// THROW_BUCKET_NOT_FOUND), and an error wrapping core.ErrCorruptState for a
// corrupt stored record. With expiration (the default, see WithExpiration)
// a bucket left idle until it expires counts as disappeared. By default a
// lost bucket is re-created from the configuration function, full, and a
// corrupt record is replaced by a new bucket with a compare-and-swap against
// it (a valid bucket written meanwhile is kept: see wire.ModeReconstruct),
// each replacement counted in Stats.CorruptReplaced and logged once
// per key, redacted (see WithLogger); a record of a newer format is never
// replaced.
func WithRecoveryFail() ManagerOption {
	return managerOption(func(o *options) { o.set |= optRecovery; o.failLost = true })
}

// WithExpiration sets the expiration-after-write policy of every write
// through a Manager (NewManager); the default is
// ExpireAfterRefill(time.Minute), which is always safe: a bucket expires
// only once it is full again (plus the margin), and a new one holds the same
// tokens (an intervally refill restarts its interval, so it refills later,
// never sooner). The zero wire.Expiry keeps buckets until removed;
// wire.Expiry{Kind: wire.ExpireFixed, Fixed: ttl} expires a bucket ttl
// nanoseconds after its last write, full or not.
func WithExpiration(e wire.Expiry) ManagerOption {
	return managerOption(func(o *options) { o.set |= optExpiration; o.expiry = e })
}

// WithFitKeys maps every key of a Manager (NewManager) through
// core.FitKey(key, maxLen) before it reaches the executor: a key longer than
// maxLen bytes, not valid UTF-8, or starting with core.DigestMarker ('#') is
// replaced by its digest (core.DigestKey, 44 bytes of ASCII), every other
// key is kept as it is. No two keys share a bucket (short of a SHA-256
// collision): digests live in a namespace of their own, which no literal key
// can reach.
//
// Turn it on when clients choose keys (API keys, header values) and the
// backend has a key rule, with the backend's limit for the key as the
// executor receives it: for Couchbase, 250 bytes minus the prefix the
// store's key mapping adds (couchbase.MaxKeyLen - len(prefix)); for MongoDB,
// mongo.MaxKeyLen. Without it such keys are refused with an error wrapping
// core.ErrInvalidKey (an HTTP middleware answers 400). Turning it on later moves
// the keys it changes (long, non-UTF-8 or '#'-prefixed ones) to new, full
// buckets. Manager.Bucket, RemoveBucket and Configuration take the key as
// given.
//
// NewManager panics when maxLen < core.DigestKeyLen, a limit no digest fits:
// backends' limits are constants, so the first test catches it.
func WithFitKeys(maxLen int) ManagerOption {
	return managerOption(func(o *options) {
		if maxLen < core.DigestKeyLen {
			panic(fmt.Sprintf("bucketgrid: WithFitKeys(%d): below core.DigestKeyLen (%d), no digest fits", maxLen, core.DigestKeyLen))
		}
		o.set |= optFitKeys
		o.fitKeys = maxLen
	})
}

// WithLogger sets where a Manager (NewManager) logs the events it must not
// handle silently (a corrupt record replaced, once per key, the key
// redacted); the default, and a nil l, is slog.Default().
func WithLogger(l *slog.Logger) ManagerOption {
	return managerOption(func(o *options) { o.set |= optLogger; o.logger = l })
}

// WithEagerConfig makes every operation of a Manager's handles
// (NewManager) call the handle's configuration function first and send the
// configuration with the request, in a mode that creates the bucket when
// absent (and, with WithConfigVersion, replaces an older configuration): a
// new bucket then costs one request to the executor instead of two, at the
// price of a configuration function call, and a few dozen more bytes to
// send and decode, on every operation. Use it when the configuration is at
// hand (a rule already matched, a plan in memory) and new buckets are
// common, as in a rate-limit service whose clients come and go. The default
// keeps the configuration function lazy: it runs only when the executor
// answers that the bucket must be created or replaced, which suits a
// function that reads a database. Results are the same either way. Under
// WithRecoveryFail a handle that has seen its bucket sends its operations
// without the configuration, so that a vanished bucket is still reported
// (ErrBucketNotFound) rather than re-created.
func WithEagerConfig() ManagerOption {
	return managerOption(func(o *options) { o.set |= optEagerConfig })
}

// WithConfigVersion enables implicit configuration replacement for a handle
// (Manager.Bucket): when the stored configuration's version is below
// version, the configuration function runs and its result replaces the
// stored one, carrying tokens over by strategy. A stored version is never
// lowered, so handles with an older version keep using the newer
// configuration.
func WithConfigVersion(version int64, strategy core.TokensInheritance) HandleOption {
	return handleOption(func(o *options) { o.set |= optConfigVersion; o.version, o.inherit = version, strategy })
}
