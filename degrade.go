package bucketgrid

import (
	"errors"
	"time"

	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/core/wire"
)

// Degrade configures a Manager's degraded mode (WithDegrade): when the
// executor fails with an outage or does not answer in time, the
// operation is decided from a bucket in this process holding this
// instance's share of the limit (core.Config.Share with the number of
// instances), so that the instances together admit about the limit while
// the backend is out: nobody unlimited, nobody refused who would have been
// admitted. The zero value selects the defaults.
//
// In time means within Timeout, or within half the time the caller's
// context has left when that is sooner: an operation waits for the
// executor no longer, then is decided locally, and a caller with a short
// deadline gets the local decision, not its deadline's error (also when
// its deadline had passed before the operation began). Envoy's
// rate-limit filter gives up after 20 ms by default and then lets the
// request through unlimited (failure_mode_deny false); it sends that
// timeout as the call's deadline (grpc-timeout), so behind a default Envoy
// the first checks of an outage, which wait before a breaker opens, stop
// waiting 10 ms after the service received them, whatever Timeout says,
// and are answered within Envoy's 20 ms on a machine that runs them when
// they wake (TestDegradeOutageStartWithinCallersDeadline keeps the rule,
// BenchmarkDegradeOutageStart measures the time).
//
// A key's local share starts from what this instance last saw of the
// key's bucket: when one of the executor's answers told how many tokens
// were left (TryConsumeAndReturnRemaining, EstimateAbilityToConsume, a
// refused TryConsume, a TryConsumeAsMuchAsPossible that took less than
// asked, a verbose answer's diagnostics), the share holds at most that
// many divided by the instances, rounded down, and refills from the
// moment of that answer at the share's rate. The instances together thus
// start from no more than the bucket held when each last saw it: an
// outage that begins after a limit was used up admits only what refills
// meanwhile. A key this instance never saw answered (or whose last answer
// added tokens, or reset or reconfigured the bucket, or that the bound on keys
// made it forget) starts from a full share: the fleet may then admit up
// to one limit more than the bucket held. That is the price of not
// refusing, for the length of an outage, clients new to this instance and
// every client of an instance just started.
//
// A circuit breaker per route (the key's owner on a grid, see Executor's Route; the
// whole store otherwise) stops waiting for a backend that failed 3 times
// in a row: from then on operations on that route are decided locally
// at once, and one probe at a time (a read of a key's configuration) is sent
// in the background every 250 ms of the Manager's clock, whether operations
// come or not. The breaker closes when a probe is answered: within 250 ms
// (plus a probe's wait) of the backend's return. What the local buckets consumed
// is then charged to the real ones, never minting: with
// wire.OpTryConsumeAsMuchAsPossible of the tokens consumed locally (a bucket
// is charged at most what it holds, and never gains a token), sent in the
// key's next request to the executor ahead of the caller's operations, so
// that the charge and the operations are one atomic batch and nothing this
// instance asks of the real bucket is decided before the charge. Keys with
// no request within Timeout of the executor's answer are charged by a
// background sweep, one at a time; a request for a key being swept waits
// for its charge. A key that consumed locally while its breaker stayed
// closed, and got no request since, is probed every 250 ms too, and swept
// once answered: an instance left idle after an outage still charges what
// it consumed. A charge that fails is retried every 250 ms, or goes with the
// key's next request; the probing ends once no breaker is open and nothing
// is left to charge (at its next pass), or with Manager.Close. One
// whose answer was lost may be charged twice (refusing early, never
// admitting more). A key decided locally again within a minute goes on from
// its share's state rather than a full share.
//
// Only outages degrade, as only outages fail open in an HTTP middleware:
// an executor error other than an invalid key (core.ErrInvalidKey), a corrupt
// record (core.ErrCorruptState), an invalid configuration
// (*core.ConfigError), a request refused (wire.ErrInvalidRequest) or one the
// executor itself says is no outage (see Executor's Outage). Those errors,
// the configuration function's errors and the caller's own context ending
// are returned as they are; a panic is not recovered. An executor that
// answers only after Timeout, although told the deadline (a grid member
// whose store waits on a dead replica), is an outage even when the
// caller's later deadline passed meanwhile: decided locally too, unless the
// caller canceled.
type Degrade struct {
	// Instances returns the number of instances sharing the limit, read
	// whenever a local bucket is made or used (a change re-cuts the local
	// buckets' shares, tokens carried over proportionally). Nil asks the
	// executor (see Executor's LiveInstances: a grid knows its members); an executor
	// that cannot tell counts as one instance, which admits the whole limit
	// on every instance: a CAS deployment of several instances says how
	// many it runs, or counts them with a cas/presence Counter on its store
	// (pass its LiveInstances, an atomic read that keeps the last count
	// while the store is out). Values below 1 count as 1.
	Instances func() int
	// Timeout bounds the wait for the executor before an operation is
	// decided locally (DefaultDegradeTimeout when 0); a caller's deadline
	// shortens it to half the time left, when that is less.
	// Probes and charges, which no caller waits on, wait for the
	// executor as long, and at least 100 ms (a restarted backend's new
	// connection must have time to be made).
	Timeout time.Duration

	// The knobs no front door turns, at their defaults outside the tests
	// (see the constants): failures is the number of outages in a row on
	// one route that opens its breaker (3); probe the time between probes
	// of an open breaker and of keys still to be charged, on the Manager's
	// clock (250 ms); maxKeys bounds the local buckets (100,000; past it,
	// an arbitrary local bucket is dropped, and with it the consumption it
	// would have charged) and the keys whose last-seen tokens are kept
	// (past it, an arbitrary one is forgotten).
	failures int
	probe    time.Duration
	maxKeys  int
}

// The defaults of Degrade. DefaultDegradeTimeout is exported for the
// flag defaults and documents that quote it; the others are stated on
// Degrade's fields.
const (
	// DefaultDegradeTimeout is below httplimit's default timeout (250 ms).
	// A caller with a nearer deadline shortens the wait (see Degrade), as
	// Envoy's rate-limit filter does with its 20 ms, so the default need
	// not be that short: 10 ms left a Redis restarted on a loaded machine
	// unanswered for 1.4-25 s (every check cut a new connection's dial
	// short), 100 ms for 22-266 ms (TestRedisOutageDegrades).
	DefaultDegradeTimeout = 100 * time.Millisecond
	// defaultDegradeFailures opens a breaker on the third outage in a row:
	// one lost packet does not, a dead backend costs three timeouts.
	defaultDegradeFailures = 3
	// defaultDegradeProbe probes an open breaker four times a second, so
	// answers resume within about a quarter of a second of the backend's
	// return.
	defaultDegradeProbe = 250 * time.Millisecond
	// defaultDegradeMaxKeys bounds the local buckets of a degraded Manager
	// at the size of a typical Spring Boot service's Caffeine cache.
	defaultDegradeMaxKeys = 100_000
)

// The optional methods of an executor that Degrade looks for, documented on
// Executor: unexported interfaces, as errors.Is looks for an Is method, since
// an executor author needs the method, not a type to name.
type (
	liveCounter      interface{ LiveInstances() int }
	router           interface{ Route(key string) string }
	outageClassifier interface{ Outage(err error) bool }
)

// WithDegrade turns on a Manager's degraded mode (NewManager); see Degrade.
// Without it, every executor error is returned to the caller.
func WithDegrade(d Degrade) ManagerOption {
	return managerOption(func(o *options) { o.set |= optDegrade; o.degrade = d })
}

// outage reports whether an executor error may be an outage.
func (d *degrader) outage(err error) bool {
	var cfgErr *core.ConfigError
	switch {
	case errors.Is(err, core.ErrInvalidKey), errors.Is(err, core.ErrCorruptState), errors.As(err, &cfgErr),
		errors.Is(err, wire.ErrInvalidRequest):
		return false
	}
	if c, ok := d.exec.(outageClassifier); ok {
		return c.Outage(err)
	}
	return true
}
