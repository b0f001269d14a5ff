package httplimit

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/core/wire"
)

// newPanicError wraps a recovered value with the current goroutine's stack,
// keeping the stack a *cas.PanicError already carries from the goroutine
// that panicked first (a round of the executor). The middleware re-panics
// with it and hands it to the WithErrorHook function.
func newPanicError(v any) *cas.PanicError {
	if p, ok := v.(*cas.PanicError); ok {
		return p
	}
	return &cas.PanicError{Value: v, Stack: debug.Stack()}
}

// takeResult is what the goroutine consulting a distributed bucket hands
// back: a decision, an error, or the panic it recovered.
type takeResult struct {
	u        Usage
	err      error
	panicked *cas.PanicError
}

// Hand-off states between take and its goroutine: the first to move the
// state away from pending decides who handles the result.
const (
	pending int32 = iota
	delivered
	abandoned
)

// take consults the bucket within the deadline. Distributed buckets are
// called on their own goroutine, under a context with the deadline, so that
// a backend ignoring its context still cannot hold the request past the
// deadline and its grace; the goroutine ends when the backend returns. A
// panic on that goroutine is recovered there and re-raised here; one that
// comes after the request gave up waiting is reported (the hook, or the
// standard logger) instead of lost.
func (m *Middleware) take(r *http.Request, key string, cost int64) (Usage, error) {
	if m.local || m.o.timeout <= 0 {
		return m.src.Take(r.Context(), key, cost)
	}
	ctx, cancel := context.WithTimeout(r.Context(), m.o.timeout)
	defer cancel()
	ch := make(chan takeResult, 1)
	var state atomic.Int32
	go func() {
		var res takeResult
		defer func() {
			if v := recover(); v != nil {
				res = takeResult{panicked: newPanicError(v)}
			}
			if state.CompareAndSwap(pending, delivered) {
				ch <- res
			} else if res.panicked != nil {
				m.latePanic(r, res.panicked)
			}
		}()
		res.u, res.err = m.src.Take(ctx, key, cost)
	}()
	wait := time.NewTimer(m.o.timeout + grace(m.o.timeout))
	defer wait.Stop()
	var res takeResult
	answered := false
	select {
	case res = <-ch:
		answered = true
	case <-r.Context().Done():
	case <-wait.C:
	}
	if !answered {
		if state.CompareAndSwap(pending, abandoned) {
			if err := r.Context().Err(); err != nil {
				return Usage{}, err
			}
			return Usage{}, fmt.Errorf("%w: no answer within %v: %w", ErrTimeout, m.o.timeout, context.DeadlineExceeded)
		}
		res = <-ch // the goroutine is handing its result over: a decision beats an error
	}
	if res.panicked != nil {
		panic(res.panicked)
	}
	if res.err != nil && errors.Is(res.err, context.DeadlineExceeded) {
		return Usage{}, fmt.Errorf("%w: %w", ErrTimeout, res.err)
	}
	return res.u, res.err
}

// grace is how long past the deadline the middleware still waits for a
// backend that honours its context to answer: it then says why it stopped
// (a store that timed out, or a key so contended that the executor gave up,
// which is not an outage), where the middleware alone would only know that
// time ran out. An eighth of the timeout, at most 50 ms.
func grace(timeout time.Duration) time.Duration { return min(timeout/8, 50*time.Millisecond) }

// latePanic reports a panic of a bucket consultation the request no longer
// waited for: the request was answered already, so it is not counted in
// Stats, but it is not silent either.
func (m *Middleware) latePanic(r *http.Request, p *cas.PanicError) {
	if m.o.onError != nil {
		m.o.onError(r, p)
		return
	}
	log.Printf("httplimit: panic in the limiter after the request stopped waiting: %v\n%s", p.Value, p.Stack)
}

// failed answers r after the bucket could not be consulted and reports
// whether next serves r: only an outage fails open (see WithFailOpen).
func (m *Middleware) failed(w http.ResponseWriter, r *http.Request, err error) (serve bool) {
	if r.Context().Err() != nil {
		m.canceled.Add(1)
		return false // nobody is listening
	}
	if errors.Is(err, core.ErrInvalidKey) {
		m.refuseKey(w, r, err)
		return false
	}
	if m.o.onError != nil {
		m.o.onError(r, err)
	}
	if m.o.failOpen && outage(err) {
		m.failedOpen.Add(1)
		return true
	}
	m.failedClosed.Add(1)
	writeProblem(w, &Problem{Type: "about:blank", Title: http.StatusText(http.StatusServiceUnavailable),
		Status: http.StatusServiceUnavailable, Detail: "the rate limiter is unavailable"})
	return false
}

// outage reports whether err may be an outage, which the failure mode
// decides, rather than a failure no retry cures: a corrupt stored record, an
// invalid configuration, a request the executor refuses, a key so contended
// that the executor gave up, or a member without a quorum (failing open
// there would admit everyone on the minority side of a split).
func outage(err error) bool {
	var cfgErr *core.ConfigError
	switch {
	case errors.Is(err, core.ErrCorruptState), errors.As(err, &cfgErr),
		errors.Is(err, wire.ErrInvalidRequest), errors.Is(err, cas.ErrConflict),
		errors.Is(err, bucketgrid.ErrNoQuorum):
		return false
	}
	return true
}

// refuseKey answers 400 for a key that cannot be used: one the KeyFunc
// refused or one the backend cannot hold. The body carries a fixed message
// per cause, never the error's text (which may hold the key, or whatever a
// custom KeyFunc put in it); the hook gets the error itself.
func (m *Middleware) refuseKey(w http.ResponseWriter, r *http.Request, err error) {
	m.badKey.Add(1)
	if m.o.onError != nil {
		m.o.onError(r, err)
	}
	writeProblem(w, &Problem{Type: "about:blank", Title: http.StatusText(http.StatusBadRequest),
		Status: http.StatusBadRequest, Detail: keyDetail(err)})
}

// keyDetail returns the fixed 400 message for a key error.
func keyDetail(err error) string {
	switch {
	case errors.Is(err, ErrNoKey):
		return "the request carries no client key"
	case errors.Is(err, ErrKeyTooLong):
		return "the client key is too long"
	case errors.Is(err, ErrRemoteAddr):
		return "the client address is not an IP address"
	case errors.Is(err, core.ErrInvalidKey):
		return "the client key cannot be stored"
	}
	return "the request's client key cannot be used"
}
