package cas

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/bucketgrid/bucketgrid/core/wire"
)

// A queue holds the requests for one key that wait while a round for the
// key is in flight. One caller at a time holds the lead: it takes the
// waiting requests (its own first) and starts their round. A round of its
// own request alone runs on its goroutine, under its context; a round of
// several runs on a goroutine of its own, so that no caller waits past its
// own context for the others. Whoever finishes a round hands the lead to the
// first request still waiting, or retires the queue, in a deferred call: a
// panic never leaves the key stuck.
type queue struct {
	sh      *queues
	waiting []*call
	leader  *call // the waiting call told to lead next, if any
}

// queues holds the queues of the keys whose hash falls in one of
// queueShards parts, so that rounds on different keys rarely meet on a
// lock.
type queues struct {
	mu sync.Mutex
	m  map[string]*queue // guarded by mu
}

const queueShards = 16

type call struct {
	ctx      context.Context
	req      wire.Request
	resp     wire.Response
	err      error
	panicked *PanicError   // the round panicked on another goroutine
	done     chan struct{} // closed when resp, err or panicked is set
	lead     chan struct{} // told to lead the next round
}

// PanicError is a panic carried from the goroutine it happened on to the
// one that re-raises it: the value a caller of Execute panics with when the
// round holding its request panicked on the round's own goroutine (see
// Execute), and the value httplimit's middleware re-panics with and
// reports when its limiter panicked. It holds the original panic value and
// the stack where it was recovered.
type PanicError struct {
	Value any
	Stack []byte
}

// Error returns "bucketgrid: panic: ", the panic value, an empty line
// and the stack. The value is printed as fmt's %v prints it when it is nil,
// an error, a fmt.Stringer, a string, a bool or a number of a predeclared
// type (what panics carry: runtime errors, panic("…"), panic(err)); any
// other value is shown as "(unprintable value; see PanicError.Value)", as
// cas does without fmt to keep it out of the Envoy filter.
func (p *PanicError) Error() string {
	return "bucketgrid: panic: " + valueText(p.Value) + "\n\n" + string(p.Stack)
}

// Unwrap returns the panic value if it is an error.
func (p *PanicError) Unwrap() error {
	err, _ := p.Value.(error)
	return err
}

// coalesce enqueues req and either leads a round for key or waits for one
// to answer it.
func (e *Executor) coalesce(ctx context.Context, key string, req wire.Request) (wire.Response, error) {
	sh := &e.queues[shardOf(key)]
	c := &call{ctx: ctx, req: req}
	sh.mu.Lock()
	q, running := sh.m[key]
	if !running {
		if sh.m == nil {
			sh.m = make(map[string]*queue)
		}
		q = &queue{sh: sh}
		sh.m[key] = q
	} else {
		// Only a call that waits needs the channels; a key's first call
		// leads at once (see lead).
		c.done, c.lead = make(chan struct{}), make(chan struct{}, 1)
	}
	q.waiting = append(q.waiting, c)
	sh.mu.Unlock()
	if !running {
		return e.lead(key, q, c)
	}
	select {
	case <-c.done:
		return c.result()
	case <-c.lead:
		return e.lead(key, q, c)
	case <-ctx.Done():
	}
	// A request still queued is withdrawn and never applied. One already in
	// a round has an unknown outcome, as after any timeout. One told to lead
	// must take the lead, which it passes on without running anything.
	sh.mu.Lock()
	withdrawn := q.leader != c && e.withdraw(q, c)
	sh.mu.Unlock()
	if !withdrawn {
		select {
		case <-c.lead:
			return e.lead(key, q, c)
		case <-c.done:
			return c.result()
		default:
		}
	}
	return wire.Response{}, ctx.Err()
}

// result returns c's answer once done is closed, panicking on the caller's
// goroutine if the round panicked on its own.
func (c *call) result() (wire.Response, error) {
	if c.panicked != nil {
		panic(c.panicked)
	}
	return c.resp, c.err
}

// wait waits for c's answer or c's context, whichever comes first.
func (c *call) wait() (wire.Response, error) {
	select {
	case <-c.done:
		return c.result()
	case <-c.ctx.Done():
		select {
		case <-c.done: // answered meanwhile: a decision beats an error
			return c.result()
		default:
			return wire.Response{}, c.ctx.Err()
		}
	}
}

// lead is called by c, which holds the lead of q: it takes the next batch
// and starts its round, then answers c.
func (e *Executor) lead(key string, q *queue, c *call) (wire.Response, error) {
	q.sh.mu.Lock()
	q.leader = nil
	batch := e.take(q)
	if len(batch) == 0 {
		e.handOff(key, q)
		q.sh.mu.Unlock()
		return wire.Response{}, c.ctx.Err()
	}
	q.sh.mu.Unlock()
	e.rounds.Add(1)
	if len(batch) == 1 && batch[0] == c {
		defer e.lockedHandOff(key, q)
		c.resp, c.err = e.execute(c.ctx, key, c.req)
		return c.resp, c.err
	}
	if batch[0] == c && c.done == nil {
		c.done = make(chan struct{}) // before the round can close it
	}
	go e.roundAsync(key, q, batch)
	if batch[0] != c { // c's context has ended: it was dropped from the batch
		return wire.Response{}, c.ctx.Err()
	}
	return c.wait()
}

// handOff passes the lead to the first waiting call, or retires q; q.sh.mu
// held.
func (e *Executor) handOff(key string, q *queue) {
	if len(q.waiting) == 0 {
		delete(q.sh.m, key)
		return
	}
	q.leader = q.waiting[0]
	q.leader.lead <- struct{}{}
}

func (e *Executor) lockedHandOff(key string, q *queue) {
	q.sh.mu.Lock()
	e.handOff(key, q)
	q.sh.mu.Unlock()
}

// withdraw removes c from q if it is still waiting; q.sh.mu held.
func (e *Executor) withdraw(q *queue, c *call) bool {
	for i, w := range q.waiting {
		if w == c {
			q.waiting = append(q.waiting[:i], q.waiting[i+1:]...)
			return true
		}
	}
	return false
}

// take removes from q the calls whose context has ended (they return their
// context's error and are never applied) and then the longest prefix of
// calls that fits in one round, up to maxBatch operations; q.sh.mu held.
func (e *Executor) take(q *queue) []*call {
	live := q.waiting[:0]
	for _, w := range q.waiting {
		if w.ctx.Err() == nil {
			live = append(live, w)
		}
	}
	clear(q.waiting[len(live):])
	q.waiting = live
	n, ops := 0, 0
	for n < len(q.waiting) {
		k := len(q.waiting[n].req.Ops)
		if n > 0 && ops+k > e.maxBatch {
			break
		}
		ops += k
		n++
	}
	batch := append([]*call(nil), q.waiting[:n]...)
	rest := copy(q.waiting, q.waiting[n:])
	clear(q.waiting[rest:])
	q.waiting = q.waiting[:rest]
	return batch
}

// roundAsync runs a round of several calls (or of a call whose leader had
// to leave) on its own goroutine, then hands the lead on. A panic is
// recovered and delivered to every waiting caller of the round, which
// re-raises it on its own goroutine: panicking here would end the process.
func (e *Executor) roundAsync(key string, q *queue, batch []*call) {
	defer e.lockedHandOff(key, q)
	defer func() {
		if v := recover(); v != nil {
			p := &PanicError{Value: v, Stack: stack()}
			for _, c := range batch {
				c.panicked = p
				close(c.done)
			}
		}
	}()
	e.round(key, batch)
}

// round runs the calls of batch in one read-process-write round and hands
// each call its own response. The round's context keeps the first call's
// values and ends when every call's context has ended (see shared), so one
// impatient caller does not fail the others.
func (e *Executor) round(key string, batch []*call) {
	ctxs := make([]context.Context, len(batch))
	reqs := make([]wire.Request, len(batch))
	resps := make([]wire.Response, len(batch))
	for i, c := range batch {
		ctxs[i], reqs[i] = c.ctx, c.req
	}
	ctx, stop := shared(ctxs)
	defer stop()
	err := e.run(ctx, key, reqs, resps)
	for i, c := range batch {
		if err == nil {
			c.resp = resps[i]
		}
		c.err = err
		close(c.done)
	}
}

// shared returns a context for work done on behalf of several callers: it
// carries the first one's values and ends when every caller's context has
// ended (never, when one caller's never ends). stop releases it.
func shared(ctxs []context.Context) (ctx context.Context, stop func()) {
	ctx = context.WithoutCancel(ctxs[0])
	for _, c := range ctxs {
		if c.Done() == nil { // this caller never gives up: neither does the work
			return ctx, func() {}
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	var left atomic.Int64
	left.Store(int64(len(ctxs)))
	stops := make([]func() bool, len(ctxs))
	for i, c := range ctxs {
		stops[i] = context.AfterFunc(c, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, s := range stops {
			s()
		}
		cancel()
	}
}

// shardOf returns the queue shard of key: FNV-1a, as the shards only spread
// lock contention.
func shardOf(key string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h = (h ^ uint32(key[i])) * 16777619
	}
	return h % queueShards
}
