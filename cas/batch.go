package cas

import (
	"context"
	"sync/atomic"

	"github.com/bucketgrid/bucketgrid/core"
)

// A queue holds the requests for one key that wait while a round for the
// key is in flight. One caller at a time leads: it takes the waiting
// requests that can share one core.Request (its own first), runs that round,
// and hands the lead to the first request still waiting, so no caller
// serves others after its own answer is ready.
type queue struct {
	waiting []*call
	leader  *call // the waiting call told to lead next, if any
}

type call struct {
	ctx  context.Context
	req  core.Request
	resp core.Response
	err  error
	done chan struct{}
	lead chan struct{} // told to lead the next round
}

// coalesce enqueues req and either leads a round for key or waits for one
// to answer it.
func (e *Executor) coalesce(ctx context.Context, key string, req core.Request) (core.Response, error) {
	c := &call{ctx: ctx, req: req, done: make(chan struct{}), lead: make(chan struct{}, 1)}
	e.mu.Lock()
	q, running := e.queues[key]
	if !running {
		q = &queue{}
		e.queues[key] = q
	}
	q.waiting = append(q.waiting, c)
	e.mu.Unlock()
	if !running {
		e.lead(key, q)
		return c.resp, c.err
	}
	select {
	case <-c.done:
		return c.resp, c.err
	case <-c.lead:
		e.lead(key, q)
		return c.resp, c.err
	case <-ctx.Done():
	}
	// A request still queued is withdrawn and never applied. One already in
	// a round has an unknown outcome, as after any timeout. One told to lead
	// must lead: the others wait on it.
	e.mu.Lock()
	withdrawn := q.leader != c && e.withdraw(q, c)
	e.mu.Unlock()
	if !withdrawn {
		select {
		case <-c.lead:
			e.lead(key, q)
		default:
		}
	}
	return core.Response{}, ctx.Err()
}

// lead runs one round, which holds the leader's own request, then passes
// the lead on or retires the queue.
func (e *Executor) lead(key string, q *queue) {
	e.mu.Lock()
	q.leader = nil
	batch := e.take(q)
	e.mu.Unlock()
	e.round(key, batch)
	e.mu.Lock()
	if len(q.waiting) == 0 {
		delete(e.queues, key)
	} else {
		q.leader = q.waiting[0]
		q.leader.lead <- struct{}{}
	}
	e.mu.Unlock()
}

// withdraw removes c from q if it is still waiting; e.mu held.
func (e *Executor) withdraw(q *queue, c *call) bool {
	for i, w := range q.waiting {
		if w == c {
			q.waiting = append(q.waiting[:i], q.waiting[i+1:]...)
			return true
		}
	}
	return false
}

// take removes from q the longest prefix of requests that can go in one
// core.Request, up to maxBatch operations; e.mu held.
func (e *Executor) take(q *queue) []*call {
	if len(q.waiting) == 0 {
		return nil
	}
	first := &q.waiting[0].req
	n, ops := 1, len(first.Ops)
	for n < len(q.waiting) {
		r := &q.waiting[n].req
		if !compatible(first, r) || ops+len(r.Ops) > e.maxBatch {
			break
		}
		ops += len(r.Ops)
		n++
	}
	batch := append([]*call(nil), q.waiting[:n]...)
	q.waiting = append(q.waiting[:0], q.waiting[n:]...)
	return batch
}

// compatible reports whether b's operations can ride in a's request: the
// same mode, version, inheritance, expiry and configuration.
func compatible(a, b *core.Request) bool {
	if a.Mode != b.Mode || a.ConfigVersion != b.ConfigVersion || a.Inheritance != b.Inheritance || a.Expiry != b.Expiry {
		return false
	}
	if (a.Config == nil) != (b.Config == nil) {
		return false
	}
	return a.Config == nil || a.Config == b.Config || a.Config.Equal(b.Config)
}

// round runs one batch as a single request and hands each call its share.
// The round's context ends only when every call's context has ended, so one
// impatient caller does not fail the others.
func (e *Executor) round(key string, batch []*call) {
	e.rounds.Add(1)
	if len(batch) == 1 {
		c := batch[0]
		c.resp, c.err = e.execute(c.ctx, key, c.req)
		close(c.done)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	left := atomic.Int64{}
	left.Store(int64(len(batch)))
	req := batch[0].req
	req.Ops = nil
	for _, c := range batch {
		req.Ops = append(req.Ops, c.req.Ops...)
		req.Verbose = req.Verbose || c.req.Verbose
		stop := context.AfterFunc(c.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
		defer stop()
	}
	resp, err := e.execute(ctx, key, req)
	i := 0
	for _, c := range batch {
		c.resp, c.err = resp, err
		if err == nil && resp.Status == core.StatusOK {
			c.resp.Results = resp.Results[i : i+len(c.req.Ops) : i+len(c.req.Ops)]
		}
		if !c.req.Verbose {
			c.resp.Diagnostics = nil
		}
		i += len(c.req.Ops)
		close(c.done)
	}
}
