//go:build !wasip1

package cas

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// pipe sends store operations of concurrent rounds, on any keys, to a
// Batcher in shared batches, as rueidis pipelines Redis commands: an
// operation that finds fewer than Flushes batches in flight and nothing
// queued goes at once, alone (by the store's single call), on its caller's
// goroutine and under its caller's context; otherwise it queues, and
// whoever ends a batch starts the next with everything queued, on a
// goroutine of its own. Nothing ever waits for more operations to arrive.
//
// A batch still in flight after cfg.StallAfter gives its place back, and
// the queue goes on without it: a store that hangs on one key (a node down
// for its partition, a locked document) delays only the operations sent
// with it, not every key behind it until their callers give up.
type pipe struct {
	b      Batcher
	one    func(ctx context.Context, op *Op) error // performs an operation alone
	cfg    PipelineConfig
	trips  *atomic.Int64 // the executor's round-trip counter
	batchd *atomic.Int64 // the executor's count of operations sent in shared batches
	stalld *atomic.Int64 // the executor's count of batches that outlived StallAfter

	mu       sync.Mutex
	queue    []*pending // guarded by mu
	inflight int        // batches in flight; guarded by mu
}

// newPipe returns a pipe over b; one performs an operation alone.
func newPipe(b Batcher, one func(ctx context.Context, op *Op) error, cfg PipelineConfig, trips, batched, stalled *atomic.Int64) *pipe {
	return &pipe{b: b, one: one, cfg: cfg, trips: trips, batchd: batched, stalld: stalled}
}

// flight is a batch's place among the Flushes in flight. It is given back
// once: when the batch returns, or when it has been in flight for
// StallAfter, whichever comes first.
type flight struct {
	held  atomic.Bool
	timer *time.Timer
}

// fly takes the place of a batch that start or do counted in flight.
func (p *pipe) fly() *flight {
	f := &flight{}
	f.held.Store(true)
	if p.cfg.StallAfter > 0 {
		f.timer = time.AfterFunc(p.cfg.StallAfter, func() {
			batches, stalled := p.land(f)
			if stalled {
				p.stalld.Add(1)
			}
			for _, b := range batches {
				go p.flushes(b)
			}
		})
	}
	return f
}

// returned ends f's batch, on the goroutine that called fly: it gives f's
// place back unless the batch stalled, and returns the batches that can
// start now (counted in flight).
func (p *pipe) returned(f *flight) [][]*pending {
	if f.timer != nil {
		f.timer.Stop()
	}
	batches, _ := p.land(f)
	return batches
}

// land gives f's place back if it still holds it, reporting so, and
// returns the batches that can start now (counted in flight).
func (p *pipe) land(f *flight) ([][]*pending, bool) {
	if !f.held.CompareAndSwap(true, false) {
		return nil, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.inflight--
	return p.start(), true
}

// pending is a queued operation and, once its batch returns, its outcome.
type pending struct {
	ctx      context.Context
	op       *Op
	err      error         // the whole batch failed
	panicked *PanicError   // the batch panicked on its goroutine
	done     chan struct{} // closed when the batch returned or panicked
}

// do performs op in a batch and returns its error: op.Result.Err, or the
// error of its whole batch. A caller whose context ends while op is queued
// withdraws it (never sent); once sent, its outcome is unknown.
func (p *pipe) do(ctx context.Context, op *Op) error {
	p.mu.Lock()
	if p.inflight < p.cfg.Flushes && len(p.queue) == 0 {
		p.inflight++
		p.mu.Unlock()
		return p.alone(ctx, op)
	}
	w := &pending{ctx: ctx, op: op, done: make(chan struct{})}
	p.queue = append(p.queue, w)
	p.mu.Unlock()
	select {
	case <-w.done:
		return w.result()
	case <-ctx.Done():
	}
	p.mu.Lock()
	withdrawn := false
	for i, q := range p.queue {
		if q == w {
			p.queue = append(p.queue[:i], p.queue[i+1:]...)
			withdrawn = true
			break
		}
	}
	p.mu.Unlock()
	if !withdrawn {
		select {
		case <-w.done: // answered meanwhile: an outcome beats an error
			return w.result()
		default:
		}
	}
	return ctx.Err()
}

// result returns w's error once done is closed, panicking on the caller's
// goroutine if the batch panicked on its own.
func (w *pending) result() error {
	if w.panicked != nil {
		panic(w.panicked)
	}
	if w.err != nil {
		return w.err
	}
	return w.op.Result.Err
}

// alone performs op on its own, as the store's single calls are cheaper
// than a batch of one, on the caller's goroutine; a panic in the store
// propagates there, and the pipe moves on.
func (p *pipe) alone(ctx context.Context, op *Op) error {
	f := p.fly()
	defer func() {
		for _, b := range p.returned(f) {
			go p.flushes(b)
		}
	}()
	p.trips.Add(1)
	return p.one(ctx, op)
}

// start takes batches of what is queued while fewer than Flushes are in
// flight, counting them in flight; p.mu held.
func (p *pipe) start() [][]*pending {
	var batches [][]*pending
	for p.inflight < p.cfg.Flushes {
		b := p.take()
		if len(b) == 0 {
			break
		}
		p.inflight++
		batches = append(batches, b)
	}
	return batches
}

// flushes sends batch, then the next batches of what queued meanwhile, on
// the one goroutine while there are any (a goroutine whose stack has grown
// into the store's client is cheaper to keep than to start), starting
// further goroutines only when Flushes allows more batches in flight.
func (p *pipe) flushes(batch []*pending) {
	for batch != nil {
		f := p.fly()
		p.flush(batch)
		batches := p.returned(f)
		batch = nil
		if len(batches) > 0 {
			batch = batches[0]
			for _, b := range batches[1:] {
				go p.flushes(b)
			}
		}
	}
}

// take removes from the queue the operations whose caller has gone (they
// are never sent) and up to Ops of the others; p.mu held.
func (p *pipe) take() []*pending {
	live := p.queue[:0]
	for _, w := range p.queue {
		if w.ctx.Err() == nil {
			live = append(live, w)
		}
	}
	clear(p.queue[len(live):])
	n := min(len(live), p.cfg.Ops)
	batch := append([]*pending(nil), live[:n]...)
	rest := copy(live, live[n:])
	clear(live[rest:])
	p.queue = live[:rest]
	return batch
}

// flush sends a batch of queued operations, under a context that ends when
// every caller's has ended, and answers each. A panic is recovered and
// handed to every caller of the batch, which re-raises it on its own
// goroutine.
func (p *pipe) flush(batch []*pending) {
	defer func() {
		if v := recover(); v != nil {
			pe := &PanicError{Value: v, Stack: stack()}
			for _, w := range batch {
				w.panicked = pe
				close(w.done)
			}
		}
	}()
	ctxs := make([]context.Context, len(batch))
	ops := make([]*Op, len(batch))
	for i, w := range batch {
		ctxs[i], ops[i] = w.ctx, w.op
	}
	ctx, stop := shared(ctxs)
	defer stop()
	p.trips.Add(1)
	if len(ops) > 1 {
		p.batchd.Add(int64(len(ops)))
	}
	err := p.b.Batch(ctx, ops)
	for _, w := range batch {
		w.err = err
		close(w.done)
	}
}
