package policy

import (
	"errors"
	"time"

	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/core/wire"
)

// Settings are a front door's: what each of its answers holds beyond the
// rules. The zero value is envoyproxy/ratelimit's default: no headers, no
// global modes, keys of up to MaxKeyBytes.
type Settings struct {
	// Headers selects the fields of Decision.Headers.
	Headers Headers
	// ShadowMode answers every request codeOK, reporting what would have been
	// refused (envoyproxy/ratelimit's SHADOW_MODE; Decision.Shadowed).
	ShadowMode bool
	// QuotaMode treats every rule as quota_mode.
	QuotaMode bool
	// MaxKeyBytes bounds Batch.Key for a store that holds shorter keys than
	// MaxKeyBytes (core.FitKey fits a longer key); 0 or more than
	// MaxKeyBytes means MaxKeyBytes, which every key fits.
	MaxKeyBytes int
}

// Plan is one request's call into the rules: the operations to execute,
// and how their results decide the request. Rules.Plan makes it; the door
// executes Batches, then hands every result back to Decide at once.
type Plan struct {
	// Batches are the operations to execute, one batch per descriptor
	// counted in a bucket, in descriptor order. Each runs atomically on
	// the bucket of its Key, created from Config when absent; batches of
	// one key run in their order, batches of different keys may run
	// concurrently.
	Batches []Batch

	items []item
	// the door's Settings, held apart so that no Settings value is stored
	headers       Headers
	shadow, quota bool
	maxKeyBytes   int
}

// Batch is the operations of one descriptor on its bucket.
type Batch struct {
	// Key is the bucket's key, fitted to Settings.MaxKeyBytes: "rls/", the
	// quoted domain and the descriptor's quoted entries (share_threshold
	// patterns in place of the values they share), so no two descriptors
	// share a bucket by accident of their characters; the limit is not part
	// of it, so an override and a reload count in the configured rule's
	// bucket.
	Key string
	// Config is the bucket's configuration, to create it when absent
	// (wire.ModeCreateIfAbsent); the first operation replaces whatever
	// configuration a stored bucket has by it.
	Config core.Config
	// Ops are the operations, run as one batch.
	Ops []wire.Op
	// Rule is the rule the batch counts, for an executor's logs (its Path
	// is safe to log, Key holds the client's values).
	Rule *Rule
}

// Outcome is what executing a Batch gave.
type Outcome struct {
	// Results answer the batch's Ops, one each.
	Results []wire.Result
	// Shares is how many instances each hold a share of the bucket, when
	// the results were decided from this instance's share (a degraded
	// executor, see core.Config.Share); 0 or 1 for the whole bucket. The
	// status and headers then describe the share.
	Shares int
	// Skipped lets the request through without this descriptor: the door
	// could not execute the batch and fails open.
	Skipped bool
}

// Decision is a request's answer.
type Decision struct {
	// Code is the request's: OverLimit when any descriptor's Code is,
	// unless Settings.ShadowMode.
	Code Code
	// Shadowed reports that Settings.ShadowMode turned an OverLimit into
	// codeOK.
	Shadowed bool
	// Statuses are the descriptors', in order.
	Statuses []Status
	// Headers are the response fields Settings.Headers selects.
	Headers []Header
}

// Plan checks req, matches its descriptors (see Match), applies
// envoyproxy/ratelimit's request rules (each descriptor's hits are its own
// hits_addend, else the request's, else 1; unlimited rules; a rule named in
// the replaces of any matched rule is dropped) and returns the request's
// plan under s (nil: the zero Settings). A request error is returned
// wrapping one of the request errors; nothing is then to be executed.
func (c *Rules) Plan(req *Request, s *Settings) (Plan, error) {
	items, batches, err := c.plan(req)
	if err != nil {
		return Plan{}, err
	}
	p := Plan{Batches: batches, items: items, maxKeyBytes: MaxKeyBytes}
	if s != nil {
		p.headers, p.shadow, p.quota = s.Headers, s.ShadowMode, s.QuotaMode
		if s.MaxKeyBytes > 0 && s.MaxKeyBytes < MaxKeyBytes {
			p.maxKeyBytes = s.MaxKeyBytes
		}
	}
	p.batch()
	return p, nil
}

// batch fills p.Batches from p.items.
func (p *Plan) batch() {
	p.Batches = p.Batches[:0]
	for i := range p.items {
		it := &p.items[i]
		if !it.NeedsBucket() {
			continue
		}
		key := it.Key
		if len(key) > p.maxKeyBytes {
			key, _ = core.FitKey(key, p.maxKeyBytes)
		}
		ops := it.Ops() // builds it.config
		p.Batches = append(p.Batches, Batch{Key: key, Config: it.config, Ops: ops, Rule: &it.Rule})
	}
}

// Probe returns the plan of the same descriptors checked without being
// charged (0 hits), which HoldBack reads; nil when fewer than two
// descriptors are limited, as a lone descriptor going over is charged
// anyway.
func (p *Plan) Probe() *Plan {
	n := 0
	for i := range p.items {
		if p.items[i].Kind == limited {
			n++
		}
	}
	if n < 2 {
		return nil
	}
	q := *p
	q.items = make([]item, len(p.items))
	q.Batches = nil
	for i := range p.items {
		q.items[i] = p.items[i]
		q.items[i].Hits = 0
		q.items[i].config = core.Config{} // rebuilt on q's own band
		if q.items[i].Kind != limited {
			q.items[i].Kind = noLimit
		}
	}
	q.batch()
	return &q
}

// HoldBack is envoyproxy/ratelimit's STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT
// as its Redis cache does it (fixed_cache_impl.go, DoLimit): given the
// Decision of p's Probe, when any limited descriptor would go over its limit
// with its hits (one of 0 hits already over included), the hits of the
// others are held back, so that only those going over are charged; their
// statuses then count the held hits as within the limit. It reports whether
// it held any back, and rebuilds Batches. As there, the check and the charge
// are two steps: requests between them are not seen by the check.
func (p *Plan) HoldBack(probe *Decision) bool {
	if probe == nil || len(probe.Statuses) != len(p.items) {
		return false
	}
	over := make([]bool, len(p.items))
	anyOver := false
	for i := range p.items {
		if p.items[i].Kind == limited {
			st := &probe.Statuses[i]
			over[i] = st.Over || p.items[i].Hits > uint64(st.Remaining)
			anyOver = anyOver || over[i]
		}
	}
	if !anyOver {
		return false
	}
	held := false
	for i := range p.items {
		it := &p.items[i]
		if it.Kind == limited && !over[i] && it.Hits > 0 {
			it.held, it.Hits = it.Hits, 0
			it.config = core.Config{}
			held = true
		}
	}
	p.batch()
	return held
}

// errOutcomes is Decide's error for outcomes that do not answer Batches.
var errOutcomes = errors.New("policy: outcomes do not answer the batches")

// Decide turns the outcomes of Batches (one each, in order) into the
// request's decision: every descriptor's status, with shares, quota and
// shadow mode applied, the request's code and the header fields. Every wait
// and reset comes from the results, that is from the clock of the side that
// ran the operations; now (that side's time, when the door knows it, or
// the door's own) is read only for the end of a fixed window nothing has
// been counted in yet, or one decided from a share. It returns an error
// only when outcomes do not answer Batches (a misbehaving executor).
func (p *Plan) Decide(outcomes []Outcome, now time.Time) (Decision, error) {
	if len(outcomes) != len(p.Batches) {
		return Decision{}, errOutcomes
	}
	d := Decision{Statuses: make([]Status, len(p.items))}
	b := 0
	for i := range p.items {
		it := &p.items[i]
		var res []wire.Result
		if it.NeedsBucket() {
			o := &outcomes[b]
			b++
			switch {
			case o.Skipped:
				it.Kind = noLimit
			default:
				it.share(o.Shares)
				res = o.Results
			}
		}
		st := &d.Statuses[i]
		var err error
		if *st, err = it.Decide(res, now); err != nil {
			return Decision{}, err
		}
		if p.quota && st.Over && st.Code == OverLimit {
			st.Code = codeOK
			it.Rule.QuotaMode = true
		}
		st.hits = it.Hits
		if it.held > 0 {
			// envoyproxy/ratelimit counts the hits it did not charge as
			// hits within the limit
			st.hits, st.withinHits = it.held, it.held
		}
		if it.Kind == limited {
			st.Rule = &it.Rule
		}
	}
	d.Code, d.Shadowed = overall(d.Statuses, p.shadow)
	if p.headers != 0 {
		d.Headers = responseHeaders(p.items, d.Statuses, p.headers)
	}
	return d, nil
}
