package quota

import (
	"container/heap"
	"sync/atomic"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
)

// Room for a new bucket id. Bucket ids come from request values, so the
// table of tracked buckets is the clients' to fill: when it is full, a new
// id takes the room of one already tracked rather than being refused, under
// rules a client cannot turn against the others:
//
//   - a ghost (a closed stream's assignment, still paid for) goes first:
//     what it may still spend is charged to its pool's debt at once;
//   - then the least recently active bucket of the stream holding the most
//     bytes, as long as that stream still holds at least as much as the
//     newcomer's stream once the newcomer is in: so a stream is never
//     pushed below the others, and one holding at most an even share of
//     MaxTrackedBytes among the open streams (less a bucket) keeps all of
//     it, however many ids and streams a client opens;
//   - then a bucket of the newcomer's own stream that no request used for
//     two periods.
//
// A stream at MaxBuckets makes room the last way only. An evicted bucket
// is answered DENY_ALL (what a refused id gets): Envoy keeps it denied and
// reports it again every interval, when it is subscribed afresh if there is
// room. What its token bucket was paid for beyond the answer's arrival is
// credited to its pool, what it had not paid is owed, as when a rebinding
// replaces it.

// idleEvictable is how many periods without a request make a bucket the
// newcomer's own stream may give up: two reports that show no request.
const idleEvictable = 2

// makeRoom frees room for a new bucket of cost bytes on st, by the rules
// above; s.mu must be held. It returns the DENY_ALL answers of the buckets
// evicted in out, by stream; when there is no room to make, false and the
// refusal counter to count (the caller refuses the id).
func (s *Server) makeRoom(st *stream, cost, now int64, out map[*stream][]*rlqspb.RateLimitQuotaResponse_BucketAction) (ok bool, refused *atomic.Int64) {
	for len(st.subs) >= s.opts.MaxBuckets {
		if !s.evictOwnIdle(st, now, out) {
			return false, &s.counts.refusedStream
		}
	}
	for s.tracked+cost > s.opts.MaxTrackedBytes {
		if g := s.anyGhost(); g != nil {
			s.evictGhost(g)
			continue
		}
		if len(s.byBytes) > 0 {
			if t := s.byBytes[0]; t != st && t.lruBack != nil && t.bytes-t.lruBack.cost >= st.bytes+cost {
				s.evict(t.lruBack, now, out)
				s.counts.evictedLargest.Add(1)
				continue
			}
		}
		if !s.evictOwnIdle(st, now, out) {
			return false, &s.counts.refusedServer
		}
	}
	return true, nil
}

// evictOwnIdle evicts st's least recently active bucket if no request
// used it for idleEvictable periods.
func (s *Server) evictOwnIdle(st *stream, now int64, out map[*stream][]*rlqspb.RateLimitQuotaResponse_BucketAction) bool {
	sb := st.lruBack
	if sb == nil || now-sb.lastActive < idleEvictable*s.period {
		return false
	}
	s.evict(sb, now, out)
	s.counts.evictedIdle.Add(1)
	return true
}

// evict forgets sb, of an open stream, and queues its DENY_ALL; s.mu must
// be held. A settle under way that planned a change for it finds it left
// its pool and settles that change through the debt.
func (s *Server) evict(sb *sub, now int64, out map[*stream][]*rlqspb.RateLimitQuotaResponse_BucketAction) {
	if p := sb.pool; p != nil {
		p.debt -= s.credit(sb, now)
		delete(p.members, sb)
		s.dropIfEmpty(p)
		sb.pool = nil
		sb.kind, sb.g, sb.max, sb.paid = unassigned, 0, 0, 0
	}
	s.untrack(sb)
	out[sb.st] = append(out[sb.st], blanketAction(sb.id, false, s.opts.TTL))
}

// dropIfEmpty forgets p if it has no members and owes nothing, as the
// next period would: evictions must not leave pools behind faster than
// periods remove them. What it holds back is lost (refused early, never
// minted).
func (s *Server) dropIfEmpty(p *pool) {
	if len(p.members) == 0 && p.debt <= 0 && s.pools[p.b.key] == p {
		delete(s.pools, p.b.key)
	}
}

// anyGhost returns a ghost, or nil.
func (s *Server) anyGhost() *sub {
	for g := range s.ghostSet {
		return g
	}
	return nil
}

// evictGhost forgets a ghost, charging its pool's debt with all it may
// still spend until its assignment expires on its Envoy.
func (s *Server) evictGhost(g *sub) {
	p := g.pool
	if end := g.sent + s.ttl + s.delivery; end > g.paid {
		p.debt += mulDiv(g.g, end-g.paid, s.period, true)
	}
	delete(p.members, g)
	g.pool = nil
	s.dropGhost(g)
	s.untrack(g)
	s.counts.evictedGhost.Add(1)
}

// dropGhost stops counting g as a ghost.
func (s *Server) dropGhost(g *sub) {
	delete(s.ghostSet, g)
	g.ghost = false
}

// track records sb as its stream's most recently active bucket; s.mu must
// be held.
func (s *Server) track(sb *sub) {
	st := sb.st
	st.subs[sb.key] = sb
	st.subsPeak = max(st.subsPeak, len(st.subs))
	st.pushFront(sb)
	s.tracked += sb.cost
	st.bytes += sb.cost
	s.resized(st)
}

// untrack forgets sb; s.mu must be held.
func (s *Server) untrack(sb *sub) {
	st := sb.st
	if st.subs[sb.key] != sb {
		return
	}
	delete(st.subs, sb.key)
	st.unlink(sb)
	s.tracked -= sb.cost
	st.bytes -= sb.cost
	s.resized(st)
}

// active moves sb to the front of its stream's order (a request used it).
func (st *stream) active(sb *sub) {
	if st.lruFront == sb {
		return
	}
	st.unlink(sb)
	st.pushFront(sb)
}

func (st *stream) pushFront(sb *sub) {
	sb.prev, sb.next = nil, st.lruFront
	if st.lruFront != nil {
		st.lruFront.prev = sb
	}
	st.lruFront = sb
	if st.lruBack == nil {
		st.lruBack = sb
	}
}

func (st *stream) unlink(sb *sub) {
	if sb.prev != nil {
		sb.prev.next = sb.next
	} else if st.lruFront == sb {
		st.lruFront = sb.next
	}
	if sb.next != nil {
		sb.next.prev = sb.prev
	} else if st.lruBack == sb {
		st.lruBack = sb.prev
	}
	sb.prev, sb.next = nil, nil
}

// resized restores the order of open streams by bytes after st's changed.
func (s *Server) resized(st *stream) {
	if st.heapAt >= 0 {
		heap.Fix(&s.byBytes, st.heapAt)
	}
}

// streamHeap is the open streams, the one holding the most bytes first.
type streamHeap []*stream

func (h streamHeap) Len() int           { return len(h) }
func (h streamHeap) Less(i, j int) bool { return h[i].bytes > h[j].bytes }
func (h streamHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapAt, h[j].heapAt = i, j
}
func (h *streamHeap) Push(x any) {
	st := x.(*stream)
	st.heapAt = len(*h)
	*h = append(*h, st)
}
func (h *streamHeap) Pop() any {
	old := *h
	st := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	st.heapAt = -1
	return st
}
