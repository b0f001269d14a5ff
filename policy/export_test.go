package policy

// Item is a descriptor's plan, for the tests of package policy_test.
type Item = item

// Items returns the items of req's plan, for the tests of package policy_test.
func (c *Rules) Items(req *Request) ([]Item, error) {
	items, _, err := c.plan(req)
	return items, err
}

// ItemKind and its values, for the tests of package policy_test.
type ItemKind = itemKind

const (
	NoLimit   = noLimit
	Unlimited = unlimited
	Limited   = limited
)

// The request errors but ErrDescriptorTooLarge, for the tests of package
// policy_test.
var (
	ErrEmptyDomain        = errEmptyDomain
	ErrNoDescriptors      = errNoDescriptors
	ErrDomainTooLong      = errDomainTooLong
	ErrTooManyDescriptors = errTooManyDescriptors
	ErrTooManyEntries     = errTooManyEntries
	ErrInvalidUTF8        = errInvalidUTF8
	ErrOverrideUnit       = errOverrideUnit
	ErrOverrideTooFast    = errOverrideTooFast
)

// The units and the domain bound, for the tests of package policy_test.
const (
	OK             = codeOK
	Second         = unitSecond
	Minute         = unitMinute
	Hour           = unitHour
	Day            = unitDay
	Week           = unitWeek
	MaxDomainBytes = maxDomainBytes
)

// Key is bucketKey, for the tests of package policy_test.
var Key = bucketKey

// IsOverride reports whether r's limit came from the request, for the tests
// of package policy_test.
func (r *Rule) IsOverride() bool { return r.override }
