package quota

import (
	"errors"
	"io"
	"sync/atomic"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Stats are the server's counters (totals since New) and gauges (now).
// None of them is broken down by anything a client sends: bucket ids and
// domains never become labels.
type Stats struct {
	// StreamsOpened counts streams accepted; Streams is those open now.
	StreamsOpened int64
	Streams       int
	// StreamErrors counts streams that ended on an error other than the
	// client's own close or cancel (a message over the size limit, a
	// failed send).
	StreamErrors int64
	// Closed counts streams the server closed for want of reports.
	Closed Closes
	// Reports is the usage reports handled (their immediate answers
	// queued); Usages the bucket usages they held.
	Reports, Usages int64
	// Buckets is the bucket ids the open streams subscribed, tracked now
	// (TrackedBytes their cost against MaxTrackedBytes, ghosts included);
	// GridBuckets the grid buckets their Envoys share; Ghosts the token
	// buckets of closed streams still paid for until they expire on their
	// Envoy.
	Buckets, GridBuckets, Ghosts int
	TrackedBytes                 int64
	// Refused counts new bucket ids answered DENY_ALL without being
	// tracked, by reason.
	Refused Refusals
	// Evicted counts tracked buckets forgotten to make room for new ids,
	// by rule (room.go).
	Evicted Evictions
	// Queued, Sent and Dropped count responses: queued for a stream, sent
	// on it, and lost because the stream's queue was full.
	Queued, Sent, Dropped int64
	// Actions counts the bucket actions sent, by kind.
	Actions Actions
	// AbandonedIdle and AbandonedUnreported count abandons decided: a
	// bucket no request used for IdleAfter, and one its Envoy stopped
	// reporting (it no longer holds it).
	AbandonedIdle, AbandonedUnreported int64
	// Expired counts ghosts that ran to their assignment's expiry.
	Expired int64
	// TokensPaid is the tokens consumed from grid buckets to pay for
	// assignments (and the reserve); TokensReturned those given back.
	TokensPaid, TokensReturned int64
	// Debt is what the grid buckets are owed now: ghosts' supply they
	// could not cover yet, paid first from later refills.
	Debt int64
	// GridErrors counts grid operations that failed (the assignments they
	// were to pay for are left to expire).
	GridErrors int64
}

// Closes counts streams closed by the server for want of reports.
type Closes struct {
	// Silent: no whole report within FirstReport of the stream's start.
	Silent int64
	// Idle: no whole report for StreamIdle since the last one.
	Idle int64
}

// Actions counts bucket actions by kind.
type Actions struct {
	TokenBucket, AllowAll, DenyAll, Abandon int64
}

// Refusals counts new bucket ids refused, by reason.
type Refusals struct {
	// StreamLimit: the stream already tracks MaxBuckets.
	StreamLimit int64
	// ServerLimit: all streams' buckets hold MaxTrackedBytes already.
	ServerLimit int64
	// TooLarge: the id is beyond the RLS's bounds (more than 32 entries,
	// more than 4096 bytes of keys and values).
	TooLarge int64
}

// Evictions counts buckets evicted for a new bucket id, by rule.
type Evictions struct {
	// Ghost: a closed stream's assignment, charged in full to its pool.
	Ghost int64
	// Largest: the least recently active bucket of the stream holding the
	// most bytes, for a stream holding less.
	Largest int64
	// Idle: a bucket of the new id's own stream no request used for two
	// periods.
	Idle int64
}

// counters are the running totals behind Stats.
type counters struct {
	streamsOpened, streamErrors         atomic.Int64
	reports, usages                     atomic.Int64
	refusedStream, refusedServer        atomic.Int64
	refusedSize                         atomic.Int64
	queued, sent, dropped               atomic.Int64
	tokenBucket, allowAll, denyAll      atomic.Int64
	abandon                             atomic.Int64
	abandonedIdle, abandonedUnreported  atomic.Int64
	expired, paid, returned, gridErrors atomic.Int64
	evictedGhost, evictedLargest        atomic.Int64
	evictedIdle                         atomic.Int64
	closedSilent, closedIdle            atomic.Int64
}

// sentActions counts the actions of one response sent.
func (c *counters) sentActions(r *rlqspb.RateLimitQuotaResponse) {
	c.sent.Add(1)
	for _, a := range r.GetBucketAction() {
		switch s := a.GetQuotaAssignmentAction().GetRateLimitStrategy(); {
		case a.GetAbandonAction() != nil:
			c.abandon.Add(1)
		case s.GetTokenBucket() != nil:
			c.tokenBucket.Add(1)
		case isBlanket(s) && s.GetBlanketRule() == typev3.RateLimitStrategy_ALLOW_ALL:
			c.allowAll.Add(1)
		default:
			c.denyAll.Add(1)
		}
	}
}

func isBlanket(s *typev3.RateLimitStrategy) bool {
	_, ok := s.GetStrategy().(*typev3.RateLimitStrategy_BlanketRule_)
	return ok
}

// streamEnded counts a stream that ended on err, if it is an error of
// the stream rather than the client's close or cancel.
func (c *counters) streamEnded(err error) {
	if err == nil || errors.Is(err, io.EOF) {
		return
	}
	switch status.Code(err) {
	case codes.Canceled, codes.Unavailable:
		return // the client went away, or the server is shutting down
	}
	c.streamErrors.Add(1)
}

// Stats returns the counters and gauges.
func (s *Server) Stats() Stats {
	c := &s.counts
	st := Stats{
		StreamsOpened: c.streamsOpened.Load(), StreamErrors: c.streamErrors.Load(),
		Closed:  Closes{Silent: c.closedSilent.Load(), Idle: c.closedIdle.Load()},
		Reports: c.reports.Load(), Usages: c.usages.Load(),
		Refused: Refusals{StreamLimit: c.refusedStream.Load(), ServerLimit: c.refusedServer.Load(),
			TooLarge: c.refusedSize.Load()},
		Evicted: Evictions{Ghost: c.evictedGhost.Load(), Largest: c.evictedLargest.Load(), Idle: c.evictedIdle.Load()},
		Queued:  c.queued.Load(), Sent: c.sent.Load(), Dropped: c.dropped.Load(),
		Actions: Actions{TokenBucket: c.tokenBucket.Load(), AllowAll: c.allowAll.Load(),
			DenyAll: c.denyAll.Load(), Abandon: c.abandon.Load()},
		AbandonedIdle: c.abandonedIdle.Load(), AbandonedUnreported: c.abandonedUnreported.Load(),
		Expired: c.expired.Load(), TokensPaid: c.paid.Load(), TokensReturned: c.returned.Load(),
		GridErrors: c.gridErrors.Load(),
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st.Streams, st.GridBuckets, st.Ghosts, st.TrackedBytes = len(s.streams), len(s.pools), len(s.ghostSet), s.tracked
	for str := range s.streams {
		st.Buckets += len(str.subs)
	}
	for _, p := range s.pools {
		st.Debt += max(p.debt, 0)
	}
	return st
}
