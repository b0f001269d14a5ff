package policy

import (
	"errors"
	"strconv"
	"unicode/utf8"

	"github.com/bucketgrid/bucketgrid/core"
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
	MaxDomainBytes     = 255  // bytes of the domain
)

// Request errors. Plan wraps them with the offending descriptor's index;
// test with errors.Is. All are the caller's fault (gRPC InvalidArgument,
// HTTP 400); none ever reaches a store.
var (
	ErrEmptyDomain        = errors.New("rate limit domain must not be empty")
	ErrNoDescriptors      = errors.New("rate limit descriptor list must not be empty")
	ErrDomainTooLong      = errors.New("rate limit domain longer than 255 bytes")
	ErrTooManyDescriptors = errors.New("more than 64 descriptors")
	ErrTooManyEntries     = errors.New("descriptor has more than 32 entries")
	ErrDescriptorTooLarge = errors.New("descriptor keys and values exceed 4096 bytes")
	ErrInvalidUTF8        = errors.New("domain is not valid UTF-8")
	ErrOverrideUnit       = errors.New("limit override has an unknown unit")
	ErrOverrideTooFast    = errors.New("limit override above 999999999 per second")
)

// RequestError is a request error of one descriptor (Descriptor ≥ 0) or of
// the domain (Descriptor < 0). Err is one of the request errors above.
type RequestError struct {
	Descriptor int
	Err        error
}

func (e *RequestError) Error() string {
	if e.Descriptor < 0 {
		return "domain: " + e.Err.Error()
	}
	return "descriptor " + strconv.Itoa(e.Descriptor) + ": " + e.Err.Error()
}

// Unwrap returns Err.
func (e *RequestError) Unwrap() error { return e.Err }

// itemKind says how a descriptor is answered.
type itemKind uint8

const (
	// noLimit: no rule applies (unmatched, or replaced by another
	// descriptor's rule): OK, not counted.
	noLimit itemKind = iota
	// unlimited: an unlimited rule applies: OK with the most remaining,
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
	held      uint64            // hits Plan.HoldBack held back
}

// plan matches every descriptor of req and applies envoyproxy/ratelimit's
// request rules: each descriptor's hits (its own hits_addend, else the
// request's, else 1), unlimited rules, and replaces (a rule named in the
// replaces of any matched rule is dropped). It returns one item per
// descriptor, in order, or an error wrapping one of the request errors.
func (c *Rules) plan(req *Request) ([]item, error) {
	if err := checkRequest(req); err != nil {
		return nil, err
	}
	items := make([]item, len(req.Descriptors))
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
		for _, name := range r.Replaces {
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
			it.Key = Key(req.Domain, req.Descriptors[i].Entries, &it.Rule)
		}
	}
	return items, nil
}

func checkRequest(req *Request) error {
	switch {
	case req.Domain == "":
		return ErrEmptyDomain
	case len(req.Domain) > MaxDomainBytes:
		return ErrDomainTooLong
	case !utf8.ValidString(req.Domain):
		return &RequestError{Descriptor: -1, Err: ErrInvalidUTF8}
	case len(req.Descriptors) == 0:
		return ErrNoDescriptors
	case len(req.Descriptors) > MaxDescriptors:
		return ErrTooManyDescriptors
	}
	for i := range req.Descriptors {
		d := &req.Descriptors[i]
		if len(d.Entries) > MaxEntries {
			return &RequestError{Descriptor: i, Err: ErrTooManyEntries}
		}
		n := 0
		for _, e := range d.Entries {
			n += len(e.Key) + len(e.Value) // any bytes: Envoy copies a client's header into a value
		}
		if n > MaxDescriptorBytes {
			return &RequestError{Descriptor: i, Err: ErrDescriptorTooLarge}
		}
		if d.Limit != nil {
			if d.Limit.Unit.Seconds() == 0 {
				return &RequestError{Descriptor: i, Err: ErrOverrideUnit}
			}
			if !refillable(d.Limit.RequestsPerUnit, d.Limit.Unit) {
				return &RequestError{Descriptor: i, Err: ErrOverrideTooFast}
			}
		}
	}
	return nil
}
