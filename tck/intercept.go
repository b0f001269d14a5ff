package tck

import (
	"context"
	"time"

	"github.com/bucketgrid/bucketgrid/cas"
)

// A hook sees one store operation on its way to the store: it may change
// op, answer it itself, or look at the outcome after calling next, which
// performs op on the store through the path it came by (a method, Write or
// a batch of one). An error it returns is the operation's failure.
type hook func(ctx context.Context, op *cas.Op, next func(context.Context, *cas.Op) error) error

// intercept wraps s so that h sees every Get, Insert and Replace, whether
// the executor calls the four methods, cas.Writer or cas.Batcher: the
// wrapper offers exactly the extensions s offers, so an executor over it
// behaves as over s — with its memory and pipeline when s has them —
// and fault injection reaches every path. Delete and CheckKey pass
// through. The operations of a batch reach h one at a time.
func intercept(s cas.Store, h hook) cas.Store {
	base := &hooked{s: s, h: h}
	w, isW := s.(cas.Writer)
	b, isB := s.(cas.Batcher)
	base.w, base.b = w, b
	switch {
	case isW && isB:
		return hookedWB{base}
	case isW:
		return hookedW{base}
	case isB:
		return hookedB{base}
	}
	return base
}

type hooked struct {
	s cas.Store
	h hook
	w cas.Writer
	b cas.Batcher
}

func (x *hooked) CheckKey(key string) error {
	if kc, ok := x.s.(cas.KeyChecker); ok {
		return kc.CheckKey(key)
	}
	return nil
}

func (x *hooked) Get(ctx context.Context, key string) ([]byte, cas.Version, bool, error) {
	op := &cas.Op{Kind: cas.OpGet, Key: key}
	err := x.h(ctx, op, func(ctx context.Context, op *cas.Op) error {
		var err error
		op.Result.Data, op.Result.Ver, op.Result.Found, err = x.s.Get(ctx, op.Key)
		return err
	})
	return op.Result.Data, op.Result.Ver, op.Result.Found, err
}

func (x *hooked) Insert(ctx context.Context, key string, data []byte, ttl time.Duration) (bool, error) {
	op := &cas.Op{Kind: cas.OpInsert, Key: key, Data: data, TTL: ttl}
	err := x.h(ctx, op, func(ctx context.Context, op *cas.Op) error {
		var err error
		op.Result.Written, err = x.s.Insert(ctx, op.Key, op.Data, op.TTL)
		return err
	})
	return op.Result.Written, err
}

func (x *hooked) Replace(ctx context.Context, key string, data []byte, ver cas.Version, ttl time.Duration) (bool, error) {
	op := &cas.Op{Kind: cas.OpReplace, Key: key, Data: data, Ver: ver, TTL: ttl}
	err := x.h(ctx, op, func(ctx context.Context, op *cas.Op) error {
		var err error
		op.Result.Written, err = x.s.Replace(ctx, op.Key, op.Data, op.Ver, op.TTL)
		return err
	})
	return op.Result.Written, err
}

func (x *hooked) Delete(ctx context.Context, key string) error { return x.s.Delete(ctx, key) }

type hookedW struct{ *hooked }

func (x hookedW) Write(ctx context.Context, op *cas.Op) error {
	return x.h(ctx, op, x.w.Write)
}

type hookedB struct{ *hooked }

func (x hookedB) Batch(ctx context.Context, ops []*cas.Op) error {
	for _, op := range ops {
		op.Result = cas.Result{}
		err := x.h(ctx, op, func(ctx context.Context, op *cas.Op) error {
			one := [1]*cas.Op{op}
			if err := x.b.Batch(ctx, one[:]); err != nil {
				return err
			}
			return op.Result.Err
		})
		if err != nil {
			op.Result = cas.Result{Err: err}
		}
	}
	return nil
}

type hookedWB struct{ *hooked }

func (x hookedWB) Write(ctx context.Context, op *cas.Op) error { return hookedW(x).Write(ctx, op) }

func (x hookedWB) Batch(ctx context.Context, ops []*cas.Op) error {
	return hookedB(x).Batch(ctx, ops)
}
