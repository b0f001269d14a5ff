package olric

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bucketgrid/bucketgrid/core/wire"
	"github.com/bucketgrid/bucketgrid/grid/olric/internal/frame"
)

// An owner-side execution can block for longer than its caller waits:
// Olric v0.7.4 does not bound a Put's writes to the partition's backups, or
// a Get's reads from its previous owners, by the context it is given, and
// a backup or previous owner that crashed or paused holds the call until
// Olric's own timeouts end it (about 1.5 s seen on the test bed). The key's
// stripe lock is held meanwhile, so every execution behind it waits too.
// execBounded keeps callers to their deadlines anyway.

// kindBusy is an outcome of hold when asked not to wait for the stripe
// lock. It never leaves this member.
const kindBusy byte = 0xff

// maxDetached bounds the executions that still run after their callers
// stopped waiting (each holds a goroutine and, at most, one stripe lock).
// Beyond it an owner whose store is stuck refuses at once (errDetached)
// rather than piling up goroutines.
const maxDetached = 4096

// errDetached answers an execution refused because maxDetached executions
// are still running for callers that left.
var errDetached = errors.New("bucketgrid/olric: the owner's store is not answering (too many executions outlived their callers)")

// ownerCall is what an owner-side execution needs, so that it can run on a
// goroutine of its own.
type ownerCall struct {
	kind  byte // frame.KindExecute, frame.KindRemove, frame.KindMerge or frame.KindLease
	key   string
	h     uint64
	req   *wire.Request // frame.KindExecute and frame.KindLease
	merge []byte        // frame.KindMerge
	want  int64         // frame.KindLease
	give  giveBack      // frame.KindLease
	// notAfter is when the caller stops waiting, m.mono nanoseconds; 0
	// when ctx alone says it.
	notAfter int64
	// owned: req belongs to this execution (decoded for it), so a detached
	// execution need not copy it.
	owned bool
}

// run executes c under ctx; try: see bound.
func (oe *ownerExec) run(ctx context.Context, c *ownerCall, try bool) outcome {
	m := oe.m
	b := bound{notAfter: c.notAfter, try: try}
	switch c.kind {
	case frame.KindMerge:
		return oe.execMerge(ctx, c.key, c.h, c.merge, b)
	case frame.KindLease:
		return m.execLease(ctx, c.key, c.h, c.req, c.want, c.give, b)
	default:
		return m.execOwnerLease(ctx, c.key, c.h, c.req, c.kind == frame.KindRemove, nil, b)
	}
}

// execBounded runs c as this member, the owner of c.key, and returns no
// later than the caller stops waiting: when ctx ends or at c.notAfter.
//
// A partition with no backup whose only owner in Olric's table is this
// member needs no I/O, and its execution runs in place when the key's
// stripe lock is free (the common case, and the cheapest). Otherwise it runs
// on a goroutine while the caller waits for its outcome, ctx or
// c.notAfter; a caller that stops waiting gets an error at once and the
// execution is detached: it ends when Olric's call does. It cannot act for
// its caller after the caller left: once it holds the stripe lock it runs
// nothing when ctx ended or c.notAfter passed (hold). Whatever it already
// ran stays applied, like any request whose answer was lost: tokens spent,
// never tokens minted.
func (oe *ownerExec) execBounded(ctx context.Context, c *ownerCall) outcome {
	m := oe.m
	if ctx.Done() == nil && c.notAfter == 0 {
		return oe.run(ctx, c, false) // nobody to keep a deadline for
	}
	if oe.localOnly(c.h) {
		if o := oe.run(ctx, c, true); o.kind != kindBusy {
			return o
		}
	}
	limit := oe.detachLimit.Load()
	if limit == 0 {
		limit = maxDetached
	}
	if oe.detached.Load() >= limit {
		return outcome{kind: frame.KindError, err: errDetached}
	}
	x := executions.Get().(*execution)
	x.ctx, x.call = ctx, *c
	if c.req != nil && !c.owned {
		// The caller may reuse its request's slices once it has an
		// answer, which it may have before a detached execution read them.
		x.req = cloneRequest(c.req)
		x.call.req = &x.req
	}
	if c.merge != nil {
		x.call.merge = slices.Clone(c.merge) // may be a connection's read buffer
	}
	go oe.runExecution(x)
	var expire <-chan time.Time
	if c.notAfter != 0 {
		t := timers.Get().(*time.Timer)
		t.Reset(time.Duration(c.notAfter - m.mono()))
		defer func() { t.Stop(); timers.Put(t) }()
		expire = t.C
	}
	var err error
	select {
	case <-x.done:
		return x.take()
	case <-ctx.Done():
		err = ctx.Err()
	case <-expire:
		err = errExpired
	}
	oe.detached.Add(1)
	if !x.state.CompareAndSwap(executionRunning, executionLeft) {
		// It finished as the caller gave up: take its outcome after all.
		oe.detached.Add(-1)
		<-x.done
		return x.take()
	}
	return outcome{kind: frame.KindError, err: fmt.Errorf("bucketgrid/olric: %w while the owner's execution was under way", err)}
}

// localOnly reports whether partition h's data is this member's alone in
// its newest routing read: no backup, and no previous owner still holding
// data of it, so that executing needs no I/O to another member.
func (oe *ownerExec) localOnly(h uint64) bool {
	m := oe.m
	r := m.routing.current()
	if r == nil {
		return true // still starting: hold answers frame.KindHold in place
	}
	p := h % m.cfg.PartitionCount
	return r.backups[p] == "" && r.history[p] == m.name
}

// execution is an owner-side execution run by runExecution, with what its
// caller waits on. Executions are pooled.
type execution struct {
	ctx   context.Context
	call  ownerCall
	req   wire.Request // a copy of the caller's request
	o     outcome
	state atomic.Int32  // executionRunning, executionLeft or executionDone
	done  chan struct{} // receives once, when done while the caller waits
}

const (
	executionRunning = iota
	executionLeft    // the caller stopped waiting: detached
	executionDone
)

var executions = sync.Pool{New: func() any { return &execution{done: make(chan struct{}, 1)} }}

var timers = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}}

// runExecution runs x and hands its outcome to the caller, or, if the
// caller left, counts it detached no more.
func (oe *ownerExec) runExecution(x *execution) {
	x.o = oe.run(x.ctx, &x.call, false)
	if x.state.CompareAndSwap(executionRunning, executionDone) {
		x.done <- struct{}{}
		return
	}
	oe.detached.Add(-1)
	x.recycle()
}

// take returns x's outcome and recycles x; x.done has been received.
func (x *execution) take() outcome {
	o := x.o
	x.recycle()
	return o
}

func (x *execution) recycle() {
	x.ctx, x.call, x.req, x.o = nil, ownerCall{}, wire.Request{}, outcome{}
	x.state.Store(executionRunning)
	executions.Put(x)
}

// cloneRequest returns a copy of r sharing none of its slices or pointers.
func cloneRequest(r *wire.Request) wire.Request {
	c := *r
	c.Ops = slices.Clone(r.Ops)
	for i := range c.Ops {
		if cfg := c.Ops[i].Config; cfg != nil {
			cc := cfg.Clone()
			c.Ops[i].Config = &cc
		}
	}
	if r.Config != nil {
		cc := r.Config.Clone()
		c.Config = &cc
	}
	return c
}
