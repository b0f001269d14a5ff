package quota

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"sync"
	"sync/atomic"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/policy"
)

// Options configure a Server. Manager and Config are required.
type Options struct {
	// Manager holds the grid buckets: the same as the RLS's, so both
	// services share every limit.
	Manager *bucketgrid.Manager
	// Config returns the rules in force (the RLS's), read at every
	// subscription and every period; nil answers every bucket DENY_ALL.
	Config func() *policy.Rules
	// Clock is the server's time; default clock.Wall().
	Clock clock.Clock
	// Period is how often assignments are recomputed and renewed, in whole
	// seconds; default 5s, Envoy's report interval (the filter reports
	// every 5 s whatever its reporting_interval says).
	Period time.Duration
	// TTL is the assignments' time to live, whole seconds, at least
	// Period + 1s; default 2×Period, so one late renewal never expires one.
	TTL time.Duration
	// Delivery bounds how long a response takes to reach an Envoy and be
	// applied; default 250ms. The bound of the package doc assumes it.
	Delivery time.Duration
	// Burst is how much of its rate an Envoy's token bucket holds: its
	// max_tokens is Burst of its rate (at least 1); default 500ms.
	Burst time.Duration
	// IdleAfter abandons a bucket an Envoy reported no request for during
	// this long; default 1m.
	IdleAfter time.Duration
	// Timeout bounds one grid operation; default 1s.
	Timeout time.Duration
	// MaxBuckets bounds the buckets one stream may subscribe (bucket ids
	// come from request values); beyond it a new one takes the room of the
	// stream's least recently used bucket if no request used that for two
	// periods, else it is answered DENY_ALL and not tracked. Default
	// 10,000.
	MaxBuckets int
	// MaxTrackedBytes bounds the memory all streams' buckets hold
	// together, counting 2 bytes per byte of a bucket id's keys and
	// values plus 2.5 KiB (TestTrackedBytesBound checks the heap stays
	// within it); beyond it a new bucket id takes the room of a bucket
	// already tracked, by rules no client can turn against the others
	// (room.go), or is answered DENY_ALL and not tracked. Default 1 GiB:
	// about 400,000 buckets of short ids. Bucket ids beyond the RLS's
	// bounds (more than 32 entries, more than 4096 bytes) are never
	// tracked.
	MaxTrackedBytes int64
	// FirstReport closes a stream that has not sent a whole report this
	// long after it opened; default 3s. Envoy sends its first report as
	// soon as it opens a stream (global_client_impl.cc), so only a client
	// that means to hold a stream's room without using it waits longer.
	FirstReport time.Duration
	// StreamIdle closes a stream that has sent no whole report for this
	// long, a report it has begun and not finished included; default
	// 3×Period (Envoy reports every Period: two reports lost).
	StreamIdle time.Duration
	// Logger receives errors; nil discards them.
	Logger *slog.Logger
}

// Server is Envoy's Rate Limit Quota Service over the grid. Create it with
// New, register it on a gRPC server and call Run.
type Server struct {
	rlqspb.UnimplementedRateLimitQuotaServiceServer

	opts                  Options
	period, ttl, delivery int64 // nanoseconds

	mu      sync.Mutex // guards everything below and every stream's and sub's state
	streams map[*stream]struct{}
	pools   map[string]*pool
	next    int64 // when the next period starts
	tracked int64 // subCost of every sub held, ghosts included
	// ghostSet is the subs of closed streams still paid for
	ghostSet map[*sub]struct{}
	// byBytes is the open streams by the bytes they hold (room.go)
	byBytes streamHeap
	// poolsPeak and ghostsPeak are the most entries pools and ghostSet
	// held since they were last rebuilt (shrink)
	poolsPeak, ghostsPeak int

	stop     chan struct{}
	stopOnce sync.Once

	counts counters
}

// ErrOptions reports unusable Options.
var ErrOptions = errors.New("quota: invalid options")

// New returns a server; it answers streams at once, and renews and
// rebalances assignments while Run runs.
func New(o Options) (*Server, error) {
	if o.Manager == nil || o.Config == nil {
		return nil, fmt.Errorf("%w: Manager and Config are required", ErrOptions)
	}
	if o.Clock == nil {
		o.Clock = clock.Wall()
	}
	if o.Period == 0 {
		o.Period = 5 * time.Second
	}
	if o.TTL == 0 {
		o.TTL = 2 * o.Period
	}
	if o.Delivery == 0 {
		o.Delivery = 250 * time.Millisecond
	}
	if o.Burst == 0 {
		o.Burst = 500 * time.Millisecond
	}
	if o.IdleAfter == 0 {
		o.IdleAfter = time.Minute
	}
	if o.Timeout == 0 {
		o.Timeout = time.Second
	}
	if o.MaxBuckets == 0 {
		o.MaxBuckets = 10_000
	}
	if o.MaxTrackedBytes == 0 {
		o.MaxTrackedBytes = 1 << 30
	}
	if o.FirstReport == 0 {
		o.FirstReport = 3 * time.Second
	}
	if o.StreamIdle == 0 {
		o.StreamIdle = 3 * o.Period
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case o.Period < time.Second || o.Period%time.Second != 0:
		return nil, fmt.Errorf("%w: Period %v: want whole seconds (Envoy reads only those)", ErrOptions, o.Period)
	case o.TTL%time.Second != 0 || o.TTL < o.Period+time.Second:
		return nil, fmt.Errorf("%w: TTL %v: want whole seconds, at least Period + 1s", ErrOptions, o.TTL)
	case o.Delivery < 0 || o.Delivery >= o.Period || o.Burst <= 0 || o.IdleAfter <= 0 || o.Timeout <= 0 || o.MaxBuckets < 0 || o.MaxTrackedBytes < 0 ||
		o.FirstReport < 0 || o.StreamIdle < 0:
		return nil, fmt.Errorf("%w: Delivery below Period, Burst, IdleAfter, Timeout, MaxBuckets, FirstReport and StreamIdle positive", ErrOptions)
	}
	return &Server{opts: o, period: int64(o.Period), ttl: int64(o.TTL), delivery: int64(o.Delivery),
		streams: map[*stream]struct{}{}, pools: map[string]*pool{}, ghostSet: map[*sub]struct{}{}, stop: make(chan struct{}),
		next: o.Clock.Now() + int64(o.Period)}, nil
}

// Run renews and rebalances every assignment each Period until ctx ends,
// then ends every stream (Unavailable): Envoy opens a new one, to another
// instance, at its next report.
func (s *Server) Run(ctx context.Context) error {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	defer s.shutdown()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			s.mu.Lock()
			due := s.opts.Clock.Now() >= s.next
			s.mu.Unlock()
			if due {
				s.tick(ctx)
			}
			s.drain(ctx)
		}
	}
}

func (s *Server) shutdown() { s.stopOnce.Do(func() { close(s.stop) }) }

// stream is one Envoy's stream.
type stream struct {
	out    chan *rlqspb.RateLimitQuotaResponse
	domain string
	subs   map[string]*sub // by canonical bucket id
	// subsPeak is the most entries subs held since it was last rebuilt
	subsPeak int
	closed   bool
	seq      uint64 // reports handled
	// bytes is the subCost of its subs (ghosts included); heapAt its
	// place in Server.byBytes (-1 once closed)
	bytes  int64
	heapAt int
	// lruFront and lruBack are its subs from the most to the least
	// recently active
	lruFront, lruBack *sub
}

// StreamRateLimitQuotas implements the RLQS API: every report's new bucket
// ids are answered at once, the rest at each period.
func (s *Server) StreamRateLimitQuotas(gs grpc.BidiStreamingServer[rlqspb.RateLimitQuotaUsageReports, rlqspb.RateLimitQuotaResponse]) (err error) {
	st := &stream{out: make(chan *rlqspb.RateLimitQuotaResponse, 64), subs: map[string]*sub{}, heapAt: -1}
	s.mu.Lock()
	select {
	case <-s.stop:
		s.mu.Unlock()
		return status.Error(codes.Unavailable, "rate limit quota service shutting down")
	default:
	}
	s.streams[st] = struct{}{}
	heap.Push(&s.byBytes, st)
	s.mu.Unlock()
	s.counts.streamsOpened.Add(1)
	defer s.close(st)
	defer func() { s.counts.streamEnded(err) }()

	ctx := gs.Context()
	recvErr := make(chan error, 1)
	// last is the clock's reading when the latest whole report arrived (0:
	// none yet). The receiver stamps it before handling the report, so a
	// report counts from its arrival even when this loop runs late, and a
	// report that arrived before the timer fired always keeps the stream.
	var last atomic.Int64
	go func() {
		for {
			r, err := gs.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			last.Store(max(s.opts.Clock.Now(), 1))
			s.report(ctx, st, r)
		}
	}()
	// The stream holds its room of the port's budget (a window and a
	// report) for as long as it is open: one that sends no report keeps
	// it from an Envoy that would. The timer runs to FirstReport, then to
	// StreamIdle after the latest report, re-armed only when it fires.
	quiet, stop := clock.After(s.opts.Clock, s.opts.FirstReport)
	defer func() { stop() }()
	for {
		select {
		case <-quiet:
			l := last.Load()
			if l == 0 {
				s.counts.closedSilent.Add(1)
				return status.Errorf(codes.Unavailable, "no usage report within %v of the stream's start", s.opts.FirstReport)
			}
			if left := time.Duration(l + int64(s.opts.StreamIdle) - s.opts.Clock.Now()); left > 0 {
				quiet, stop = clock.After(s.opts.Clock, left)
				continue
			}
			s.counts.closedIdle.Add(1)
			return status.Errorf(codes.Unavailable, "no whole usage report for %v", s.opts.StreamIdle)
		case resp := <-st.out:
			if err := gs.Send(resp); err != nil {
				return err
			}
			s.counts.sentActions(resp)
		case err := <-recvErr:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case <-s.stop:
			return status.Error(codes.Unavailable, "rate limit quota service shutting down")
		}
	}
}

// push queues resp for st without blocking: a stream too slow to take its
// answers loses them (its assignments then expire into Envoy's fallback).
func (s *Server) push(st *stream, acts []*rlqspb.RateLimitQuotaResponse_BucketAction) {
	if len(acts) == 0 {
		return
	}
	select {
	case st.out <- &rlqspb.RateLimitQuotaResponse{BucketAction: acts}:
		s.counts.queued.Add(1)
	default:
		s.counts.dropped.Add(1)
	}
}

// close forgets st: its buckets holding a token bucket stay charged until
// their assignments expire on the Envoy (ghosts), the others go at once.
func (s *Server) close(st *stream) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st.closed = true
	delete(s.streams, st)
	heap.Remove(&s.byBytes, st.heapAt)
	for _, sb := range st.subs {
		if sb.pool != nil && sb.kind == bucketAssigned && sb.g > 0 {
			sb.ghost = true
			s.ghostSet[sb] = struct{}{}
			s.ghostsPeak = max(s.ghostsPeak, len(s.ghostSet))
			continue
		}
		if sb.pool != nil {
			delete(sb.pool.members, sb)
		}
		s.untrack(sb) // a ghost holds the stream, so free the rest now
	}
}

// report handles one usage report: new bucket ids subscribe and are
// answered now; known ones update their Envoy's demand.
func (s *Server) report(ctx context.Context, st *stream, r *rlqspb.RateLimitQuotaUsageReports) {
	defer s.counts.reports.Add(1)
	s.counts.usages.Add(int64(len(r.GetBucketQuotaUsages())))
	now := s.opts.Clock.Now()
	cfg := s.opts.Config()
	var acts []*rlqspb.RateLimitQuotaResponse_BucketAction
	byPool := map[*pool][]*sub{}
	evicted := map[*stream][]*rlqspb.RateLimitQuotaResponse_BucketAction{}
	s.mu.Lock()
	if st.closed {
		s.mu.Unlock()
		return
	}
	if st.domain == "" {
		st.domain = r.GetDomain()
	}
	next := s.next
	st.seq++
	for _, u := range r.GetBucketQuotaUsages() {
		id := u.GetBucketId()
		if len(id.GetBucket()) == 0 {
			continue // Envoy ignores an action without a bucket id
		}
		key := canonical(id)
		sb := st.subs[key]
		if sb != nil {
			if n := satAdd(u.GetNumRequestsAllowed(), u.GetNumRequestsDenied()); n > 0 {
				st.active(sb)
				sb.observe(n, now, s.period)
			} else {
				sb.observe(0, now, s.period)
			}
			if u.GetTimeElapsed().GetSeconds() > 0 || sb.seq == st.seq || (sb.freshAt != 0 && now-sb.freshAt < s.period) {
				// a periodic report; or the id again in one report, or a
				// second re-creation within a period: a client's, not
				// Envoy's (each new assignment costs its max_tokens)
				continue
			}
			// under a second since the Envoy last reported it: the
			// immediate report of a bucket it (re)created, perhaps after
			// an abandon that crossed a report; answer it now, as new
			sb.fresh, sb.freshAt, sb.seq = true, now, st.seq
			if sb.pool != nil {
				byPool[sb.pool] = append(byPool[sb.pool], sb)
			} else {
				acts = append(acts, blanketAction(sb.id, sb.b.kind == allowAll, s.opts.TTL))
			}
			continue
		}
		cost := subCost(key)
		var refused *atomic.Int64
		if len(id.GetBucket()) > policy.MaxEntries || len(key) > policy.MaxDescriptorBytes+2*policy.MaxEntries {
			refused = &s.counts.refusedSize
		} else if ok, r := s.makeRoom(st, cost, now, evicted); !ok {
			refused = r
		}
		if refused != nil {
			// DENY_ALL, not tracked: Envoy reports the bucket again and
			// gets the same answer, until there is room
			refused.Add(1)
			acts = append(acts, blanketAction(bareID(id), false, s.opts.TTL))
			continue
		}
		sb = &sub{st: st, id: bareID(id), key: key, rate: -1, lastReport: now, lastSeen: now, lastActive: now,
			seq: st.seq, cost: cost}
		s.track(sb)
		s.bindSub(sb, cfg)
		if sb.pool != nil {
			byPool[sb.pool] = append(byPool[sb.pool], sb)
		} else {
			acts = append(acts, blanketAction(sb.id, sb.b.kind == allowAll, s.opts.TTL))
		}
	}
	s.mu.Unlock()
	for other, a := range evicted {
		if other == st {
			acts = append(acts, a...)
		} else {
			s.push(other, a)
		}
	}
	for p, subs := range byPool {
		for _, a := range s.settle(ctx, p, subs, now, next) {
			acts = append(acts, a.act)
		}
	}
	s.push(st, acts)
}

// bareID is a copy of id holding its entries only: a client's unknown
// fields are neither kept nor echoed in every answer.
func bareID(id *rlqspb.BucketId) *rlqspb.BucketId {
	return &rlqspb.BucketId{Bucket: maps.Clone(id.GetBucket())}
}

// subOverhead is what a tracked bucket holds beyond its id's bytes (the
// sub, its id's map, the entries of the stream's and the pool's maps, and
// for an id of its own grid bucket the pool and the memory grid's bucket),
// rounded up from TestTrackedBytesBound's measurement (1.9 KB).
const subOverhead = 2560

// subCost is what tracking the bucket of canonical key costs: its key, the
// copy of its entries, and the overhead.
func subCost(key string) int64 { return 2*int64(len(key)) + subOverhead }

// satAdd is a + b, saturating: a client's counts may be anything.
func satAdd(a, b uint64) uint64 {
	if a+b < a {
		return math.MaxUint64
	}
	return a + b
}

// bindSub binds sb under cfg and joins it to its pool; s.mu must be held.
func (s *Server) bindSub(sb *sub, cfg *policy.Rules) {
	sb.cfg = cfg
	sb.b = bind(cfg, sb.st.domain, sb.id.GetBucket(), s.opts.Period)
	if sb.b.kind != limited {
		return
	}
	p := s.pools[sb.b.key]
	if p == nil {
		p = &pool{members: map[*sub]struct{}{}}
		s.pools[sb.b.key] = p
		s.poolsPeak = max(s.poolsPeak, len(s.pools))
	}
	p.b = sb.b
	p.members[sb] = struct{}{}
	sb.pool = p
}

// Register creates a server and registers it on gs; call its Run.
func Register(gs grpc.ServiceRegistrar, o Options) (*Server, error) {
	s, err := New(o)
	if err != nil {
		return nil, err
	}
	rlqspb.RegisterRateLimitQuotaServiceServer(gs, s)
	return s, nil
}
