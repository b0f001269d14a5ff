package policy

import (
	"errors"
	"strconv"
	"unicode/utf8"

	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/core/wire"
)

// Request is one ShouldRateLimit call, as Envoy sends it.
type Request struct {
	Domain      string
	Descriptors []Descriptor
	// HitsAddend is the hits of every descriptor without its own; 0 means 1.
	HitsAddend uint32
}

// Descriptor is one request descriptor.
type Descriptor struct {
	Entries []Entry
	// Limit, when set, overrides the configured limit.
	Limit *Override
	// HitsAddend, when set, is this descriptor's hits, and may be 0: the
	// descriptor is then checked without being charged.
	HitsAddend *uint64
}

// Bounds on a request. Descriptors are chosen by clients (Envoy copies
// headers and paths into them), so they are hostile input: a request beyond
// these bounds is refused as a whole before anything is counted.
const (
	MaxDescriptors     = 64   // descriptors per request
	MaxEntries         = 32   // entries per descriptor
	MaxDescriptorBytes = 4096 // bytes of all keys and values of one descriptor
	maxDomainBytes     = 255  // bytes of the domain
)

// ErrDescriptorTooLarge is the request error of a descriptor whose keys and
// values exceed MaxDescriptorBytes: the one a client's own values cause
// (Envoy copies headers and paths into descriptors), which the service
// answers OVER_LIMIT rather than with an error Envoy's failure_mode_deny
// would let through.
var ErrDescriptorTooLarge = errors.New("descriptor keys and values exceed 4096 bytes")

// The other request errors: the route configuration's doing. Every error
// Plan returns is the caller's fault (gRPC InvalidArgument, HTTP 400),
// names the offending descriptor or the domain, and never reaches a store.
var (
	errEmptyDomain        = errors.New("rate limit domain must not be empty")
	errNoDescriptors      = errors.New("rate limit descriptor list must not be empty")
	errDomainTooLong      = errors.New("rate limit domain longer than 255 bytes")
	errTooManyDescriptors = errors.New("more than 64 descriptors")
	errTooManyEntries     = errors.New("descriptor has more than 32 entries")
	errInvalidUTF8        = errors.New("domain is not valid UTF-8")
	errOverrideUnit       = errors.New("limit override has an unknown unit")
	errOverrideTooFast    = errors.New("limit override above 999999999 per second")
)

// requestError is a request error of one descriptor (descriptor ≥ 0) or of
// the domain (descriptor < 0); it unwraps to one of the errors above.
type requestError struct {
	descriptor int
	err        error
}

func (e *requestError) Error() string {
	if e.descriptor < 0 {
		return "domain: " + e.err.Error()
	}
	return "descriptor " + strconv.Itoa(e.descriptor) + ": " + e.err.Error()
}

func (e *requestError) Unwrap() error { return e.err }

// itemKind says how a descriptor is answered.
type itemKind uint8

const (
	// noLimit: no rule applies (unmatched, or replaced by another
	// descriptor's rule): codeOK, not counted.
	noLimit itemKind = iota
	// unlimited: an unlimited rule applies: codeOK with the most remaining,
	// not counted.
	unlimited
	// limited: the rule is counted in the bucket of Key.
	limited
)

// item is the plan for one descriptor of a request.
type item struct {
	Kind itemKind
	// Rule is the matched rule (unlimited, limited).
	Rule Rule
	// Hits is the number of hits to charge; 0 checks without charging.
	Hits uint64
	// Key is the bucket's key (limited): the domain and the descriptor's
	// entries, share_threshold patterns in place of shared values (see
	// Key). Keys longer than MaxKeyBytes are hashed.
	Key string

	nearRatio float32
	shares    uint32            // the instances of a share (see Share); 0 for the whole bucket
	config    core.Config       // BucketConfig, once built
	band      [1]core.Bandwidth // config's bandwidth, without an allocation
	ops       [3]wire.Op        // Ops' operations, without an allocation
	held      uint64            // hits Plan.HoldBack held back
}

// plan matches every descriptor of req and applies envoyproxy/ratelimit's
// request rules: each descriptor's hits (its own hits_addend, else the
// request's, else 1), unlimited rules, and replaces (a rule named in the
// replaces of any matched rule is dropped). It returns one item per
// descriptor, in order, or an error wrapping one of the request errors;
// batches is empty, with room for one batch per item.
func (c *Rules) plan(req *Request) (items []item, batches []Batch, err error) {
	if err := checkRequest(req); err != nil {
		return nil, nil, err
	}
	if len(req.Descriptors) == 1 {
		// the common request: its item and batch in one allocation
		one := new(struct {
			items   [1]item
			batches [1]Batch
		})
		items, batches = one.items[:], one.batches[:0]
	} else {
		items, batches = make([]item, len(req.Descriptors)), make([]Batch, 0, len(req.Descriptors))
	}
	var replaced map[string]bool
	for i := range req.Descriptors {
		d := &req.Descriptors[i]
		it := &items[i]
		it.nearRatio = c.opts.NearLimitRatio
		it.Hits = uint64(max(req.HitsAddend, 1))
		if d.HitsAddend != nil {
			it.Hits = *d.HitsAddend
		}
		r, ok := c.match(req.Domain, d.Entries, d.Limit)
		if !ok {
			continue
		}
		it.Rule = r
		it.Kind = limited
		if r.Unlimited {
			it.Kind = unlimited
		}
		for _, name := range r.replaces {
			if replaced == nil {
				replaced = map[string]bool{}
			}
			replaced[name] = true
		}
	}
	for i := range items {
		it := &items[i]
		if it.Kind == limited && it.Rule.Name != "" && replaced[it.Rule.Name] {
			it.Kind, it.Rule = noLimit, Rule{}
		}
		if it.Kind == limited {
			it.Key = bucketKey(req.Domain, req.Descriptors[i].Entries, &it.Rule)
		}
	}
	return items, batches, nil
}

func checkRequest(req *Request) error {
	switch {
	case req.Domain == "":
		return errEmptyDomain
	case len(req.Domain) > maxDomainBytes:
		return errDomainTooLong
	case !utf8.ValidString(req.Domain):
		return &requestError{-1, errInvalidUTF8}
	case len(req.Descriptors) == 0:
		return errNoDescriptors
	case len(req.Descriptors) > MaxDescriptors:
		return errTooManyDescriptors
	}
	for i := range req.Descriptors {
		d := &req.Descriptors[i]
		if len(d.Entries) > MaxEntries {
			return &requestError{i, errTooManyEntries}
		}
		n := 0
		for _, e := range d.Entries {
			n += len(e.Key) + len(e.Value) // any bytes: Envoy copies a client's header into a value
		}
		if n > MaxDescriptorBytes {
			return &requestError{i, ErrDescriptorTooLarge}
		}
		if d.Limit != nil {
			if d.Limit.Unit.seconds() == 0 {
				return &requestError{i, errOverrideUnit}
			}
			if !refillable(d.Limit.RequestsPerUnit, d.Limit.Unit) {
				return &requestError{i, errOverrideTooFast}
			}
		}
	}
	return nil
}
