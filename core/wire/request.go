package wire

import (
	"errors"
	"github.com/bucketgrid/bucketgrid/core"
	"math"
	"strconv"
)

// OpKind names a bucket operation of the distributed command set.
type OpKind uint8

// The operations. Their results are reported in a Result as documented on
// each.
const (
	// OpTryConsume: OK = consumed.
	OpTryConsume OpKind = iota + 1
	// OpTryConsumeAndReturnRemaining: OK = consumed, Tokens = remaining,
	// Wait = nanos to wait for refill, Reset = nanos to wait for reset.
	OpTryConsumeAndReturnRemaining
	// OpEstimate: OK = can be consumed, Tokens = remaining, Wait.
	OpEstimate
	// OpTryConsumeAsMuchAsPossible: Tokens = consumed; Op.Tokens is the limit
	// (math.MaxInt64 for none).
	OpTryConsumeAsMuchAsPossible
	// OpAddTokens adds capped tokens.
	OpAddTokens
	// OpForceAddTokens adds tokens beyond capacity.
	OpForceAddTokens
	// OpConsumeIgnoringRateLimits: Wait = nanos until the overdraft is repaid;
	// OK = false and Wait = math.MaxInt64 when refused.
	OpConsumeIgnoringRateLimits
	// OpReserve: Wait = nanos to sleep before using the tokens; OK = false
	// when they would not come within Op.MaxWait, and then Tokens = the
	// smallest capacity, so that a caller tells a request that can never be
	// reserved (Op.Tokens > Tokens) from one that would wait too long.
	OpReserve
	// OpReset fills the bucket.
	OpReset
	// OpAvailableTokens: Tokens = available.
	OpAvailableTokens
	// OpReplaceConfiguration replaces the configuration with Op.Config by
	// Op.Inheritance. It does not change the stored configuration version.
	// Replacing a configuration by an equal one, with any strategy but
	// InheritReset, where every bandwidth takes over from itself (see
	// TokensInheritance) and none holds more than its capacity, leaves the
	// bucket as it is and reports no change.
	OpReplaceConfiguration
	// OpGetConfiguration changes nothing; the response carries Diagnostics.
	OpGetConfiguration
)

// Op is one bucket operation.
type Op struct {
	Kind OpKind
	// Tokens is the token count (the limit for as-much-as-possible).
	Tokens int64
	// MaxWait bounds OpReserve, in nanoseconds.
	MaxWait int64
	// Config and Inheritance are for OpReplaceConfiguration.
	Config      *core.Config
	Inheritance core.TokensInheritance
}

// Mode says what Process does when the bucket is absent or its stored
// configuration version is older than the request's.
type Mode uint8

const (
	// ModeBare executes against an existing bucket; absent: StatusNotFound.
	ModeBare Mode = iota
	// ModeCreateIfAbsent creates the bucket from Request.Config (with
	// Request.ConfigVersion) when absent, then executes.
	ModeCreateIfAbsent
	// ModeCheckVersion is ModeBare that answers StatusConfigNeedsReplacing when
	// the stored configuration version is below Request.ConfigVersion.
	ModeCheckVersion
	// ModeCreateOrReplace creates the bucket when absent, or replaces its
	// configuration by Request.Inheritance when the stored version is below
	// Request.ConfigVersion, then executes.
	ModeCreateOrReplace
	// ModeReconstruct is ModeCreateOrReplace that also treats stored bytes
	// that do not decode as a bucket (ErrCorrupt) as absent: it writes a new
	// bucket from Request.Config over them. A CAS executor writes it with
	// Replace against the corrupt record's version, so a valid bucket written
	// meanwhile is never overwritten. A bucket record of a newer format (a
	// later format version followed by the bucket tag: a newer writer's
	// record, during a rolling upgrade, where a fresh bucket over it on
	// every alternation would reset the limit) is not replaced: it stays
	// StatusCorruptState. The Manager sends it under
	// RecoveryReconstruct after a StatusCorruptState answer.
	ModeReconstruct

	numModes
)

// ExpiryKind says how long a written bucket lives in storage.
type ExpiryKind uint8

const (
	// ExpireNever writes without a TTL.
	ExpireNever ExpiryKind = iota
	// ExpireFixed writes with the TTL Expiry.Fixed.
	ExpireFixed
	// ExpireAfterRefill writes with a TTL of the time until the bucket is
	// full again plus Expiry.Margin: an expired bucket is then a full one,
	// and a new one holds no more. A bucket whose configuration starts a
	// bandwidth above its capacity (WithInitialTokens) is written without a
	// TTL: re-creating it would hand out the surplus again.
	ExpireAfterRefill

	numExpiryKinds
)

// Expiry is the expiration-after-write policy carried by a request.
type Expiry struct {
	Kind   ExpiryKind
	Fixed  int64 // nanoseconds, for ExpireFixed
	Margin int64 // nanoseconds, for ExpireAfterRefill
}

// MinTTL is the smallest TTL Process asks for, so that a positive TTL never
// rounds to zero ("no expiry") in a store with coarser units.
const MinTTL = int64(1e6)

// ttl returns the TTL of b after a write at now; 0 for none.
func (e Expiry) ttl(b *core.State, now int64) int64 {
	var t int64
	switch e.Kind {
	case ExpireFixed:
		t = e.Fixed
	case ExpireAfterRefill:
		if startsAboveCapacity(&b.Config) {
			return 0
		}
		full := b.TimeToFull(now)
		if full == math.MaxInt64 {
			return 0
		}
		t = full + min(e.Margin, math.MaxInt64-full) // both ≥ 0: saturates
	default:
		return 0
	}
	return max(t, MinTTL)
}

// MaxOps bounds a batch.
const MaxOps = 1024

// Request is one distributed command: one or more operations applied in
// order, atomically, to one bucket.
type Request struct {
	Mode Mode
	Ops  []Op
	// Config creates (or replaces) the bucket in the create modes.
	Config *core.Config
	// ConfigVersion is the desired configuration version.
	ConfigVersion int64
	// Inheritance is the strategy of an implicit replacement.
	Inheritance core.TokensInheritance
	// Expiry computes the TTL of the written state.
	Expiry Expiry
	// Verbose asks for Diagnostics in the response.
	Verbose bool
}

// Why a request is invalid; a *RequestError wraps one (or the
// configuration's *core.ConfigError, or core.ErrUnknownStrategy). Constants
// of a string type rather than errors.New values: nothing to initialise or
// allocate in the .wasm.
const (
	errNoOps           = reason("request has no operation")
	errTooManyOps      = reason("request has more than 1024 operations") // MaxOps
	errTokens          = reason("token count must be positive")
	errUnknownOp       = reason("unknown operation")
	errUnknownMode     = reason("unknown mode")
	errMissingConfig   = reason("mode or operation needs a configuration")
	errExpiry          = reason("invalid expiry")
	errNegativeMaxWait = reason("max wait must not be negative")
	errNegativeVersion = reason("configuration version must not be negative")
)

// reason is why a request is invalid.
type reason string

func (r reason) Error() string { return string(r) }

// RequestError reports an invalid request (Request.Validate; Process answers
// StatusInvalidRequest with its text). It unwraps to the reason: for an
// invalid configuration its *core.ConfigError, for an unknown strategy
// core.ErrUnknownStrategy.
type RequestError struct {
	Op  int // index of the operation, -1 for the request itself
	Err error
}

func (e *RequestError) Error() string {
	if e.Op < 0 {
		return "bucketgrid: invalid request: " + e.Err.Error()
	}
	return "bucketgrid: invalid request: operation " + strconv.Itoa(e.Op) + ": " + errText(e.Err)
}

// Unwrap returns the cause.
func (e *RequestError) Unwrap() error { return e.Err }

// Validate reports why r cannot be processed, or nil. Configurations are
// validated too, so nothing invalid is ever written.
func (r *Request) Validate() error {
	if r.Mode >= numModes {
		return &RequestError{-1, errUnknownMode}
	}
	if len(r.Ops) == 0 {
		return &RequestError{-1, errNoOps}
	}
	if len(r.Ops) > MaxOps {
		return &RequestError{-1, errTooManyOps}
	}
	if r.Mode == ModeCreateIfAbsent || r.Mode == ModeCreateOrReplace || r.Mode == ModeReconstruct {
		if r.Config == nil {
			return &RequestError{-1, errMissingConfig}
		}
		if err := r.Config.Validate(); err != nil {
			return &RequestError{-1, err}
		}
	}
	if r.ConfigVersion < 0 {
		return &RequestError{-1, errNegativeVersion}
	}
	if !r.Inheritance.Valid() {
		return &RequestError{-1, core.ErrUnknownStrategy}
	}
	if r.Expiry.Kind >= numExpiryKinds || r.Expiry.Fixed < 0 || r.Expiry.Margin < 0 ||
		(r.Expiry.Kind == ExpireFixed && r.Expiry.Fixed == 0) {
		return &RequestError{-1, errExpiry}
	}
	for i := range r.Ops {
		if err := r.Ops[i].validate(); err != nil {
			return &RequestError{i, err}
		}
	}
	return nil
}

func (o *Op) validate() error {
	switch o.Kind {
	case OpTryConsume, OpTryConsumeAndReturnRemaining, OpEstimate, OpTryConsumeAsMuchAsPossible,
		OpAddTokens, OpForceAddTokens, OpConsumeIgnoringRateLimits:
		if o.Tokens <= 0 {
			return errTokens
		}
	case OpReserve:
		if o.Tokens <= 0 {
			return errTokens
		}
		if o.MaxWait < 0 {
			return errNegativeMaxWait
		}
	case OpReset, OpAvailableTokens, OpGetConfiguration:
	case OpReplaceConfiguration:
		if o.Config == nil {
			return errMissingConfig
		}
		if !o.Inheritance.Valid() {
			return core.ErrUnknownStrategy
		}
		return o.Config.Validate()
	default:
		return errUnknownOp
	}
	return nil
}

// Status is the outcome of a request as a whole.
type Status uint8

const (
	// StatusOK means the operations ran; see Response.Results.
	StatusOK Status = iota
	// StatusNotFound means the bucket does not exist and the request did not
	// carry a configuration: resend in a create mode.
	StatusNotFound
	// StatusConfigNeedsReplacing means the stored configuration version is
	// older than requested: resend with ModeCreateOrReplace.
	StatusConfigNeedsReplacing
	// StatusInvalidRequest means the request failed validation; nothing ran.
	StatusInvalidRequest
	// StatusCorruptState means the stored bytes could not be decoded; nothing
	// ran and nothing was written.
	StatusCorruptState

	numStatuses
)

// String returns the status in lower-case words ("ok", "bucket not found"),
// for messages; an invalid s reads Status(n).
func (s Status) String() string {
	switch s {
	case StatusOK:
		return "ok"
	case StatusNotFound:
		return "bucket not found"
	case StatusConfigNeedsReplacing:
		return "configuration needs replacing"
	case StatusInvalidRequest:
		return "invalid request"
	case StatusCorruptState:
		return "corrupt stored state"
	}
	return "Status(" + strconv.Itoa(int(s)) + ")"
}

// Result is the outcome of one operation; see each OpKind for its fields.
type Result struct {
	OK     bool
	Tokens int64
	Wait   int64
	Reset  int64
}

// Response is the answer to a Request.
type Response struct {
	Status  Status
	Results []Result
	// TTL is how long the written state should live, in nanoseconds; 0 for no
	// expiry. Meaningful when Process reports a change.
	TTL int64
	// Diagnostics is set for verbose requests and OpGetConfiguration.
	Diagnostics *core.Diagnostics
	// Message explains StatusInvalidRequest and StatusCorruptState.
	Message string
}

// ErrInvalidRequest: Process refused the request (Response.Err of
// StatusInvalidRequest).
var ErrInvalidRequest = errors.New("bucketgrid: invalid request")

// Err returns the error a failed response stands for, or nil for the
// statuses a caller handles itself (OK, not found, needs replacing).
func (r *Response) Err() error {
	switch r.Status {
	case StatusInvalidRequest:
		return wrap(ErrInvalidRequest, ": "+r.Message)
	case StatusCorruptState:
		return wrap(core.ErrCorruptState, ": "+r.Message)
	}
	return nil
}
