package redis

import (
	"context"

	goredis "github.com/redis/go-redis/v9"

	"github.com/bucketgrid/bucketgrid/cas"
)

// This file holds the store's optional extensions of cas.Store. Neither is
// needed for correctness — Insert and Replace above are the whole
// protocol — but they take a check from two round trips to one, and let
// concurrent checks share them.
//
//   - cas.Writer: the script already knows what a write did, so Write
//     reports it: the version it stored (chosen here, before sending), or,
//     after a lost race, the value that won (the script returns it). The
//     executor then remembers each bucket's version and skips the GET.
//   - cas.Batcher: a go-redis pipeline carries any number of GETs and
//     scripts in one round trip. Redis runs each command of a pipeline
//     atomically on its own, which is all the contract asks; the executor
//     never puts two operations on one key in a batch.

// Write performs op, an OpInsert or an OpReplace, with one script call, and
// reports the version written or the value that won a lost race.
func (s *Store) Write(ctx context.Context, op *cas.Op) error {
	return s.writeAs(ctx, op, newVersion(op.Ver))
}

// Batch performs ops in one pipeline: a GET for each OpGet, a script call
// for each write. A failure of one command (a key this store refuses, a
// value it did not write, a WRONGTYPE key) is that op's Result.Err. When
// the connection fails every command fails with its error, each op's
// Result.Err; Batch itself fails only when ctx has ended. Scripts the
// server has forgotten (NOSCRIPT) go again with EVAL in a second pipeline.
func (s *Store) Batch(ctx context.Context, ops []*cas.Op) error {
	writes := make([]write, len(ops))
	cmds := make([]goredis.Cmder, len(ops))
	_, _ = s.c.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i, op := range ops {
			op.Result = cas.Result{}
			if op.Kind == cas.OpGet {
				if err := s.CheckKey(op.Key); err != nil {
					op.Result.Err = err
					continue
				}
				cmds[i] = p.Get(ctx, s.prefix+op.Key)
				continue
			}
			w, err := s.prepare(op, newVersion(op.Ver))
			if err != nil {
				op.Result.Err = err
				continue
			}
			writes[i] = w
			cmds[i] = p.EvalSha(ctx, casSHA, w.keys, w.args...)
		}
		return nil
	})
	var again []int
	for i, cmd := range cmds {
		if cmd == nil {
			continue
		}
		if isNoScript(cmd.Err()) {
			again = append(again, i)
			continue
		}
		s.settle(ops[i], writes[i], cmd)
	}
	if len(again) > 0 {
		s.fallbacks.Add(int64(len(again)))
		_, _ = s.c.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for _, i := range again {
				cmds[i] = p.Eval(ctx, casScript, writes[i].keys, writes[i].args...)
			}
			return nil
		})
		for _, i := range again {
			s.settle(ops[i], writes[i], cmds[i])
		}
	}
	return ctx.Err()
}

// settle sets op's outcome from its command in a pipeline.
func (s *Store) settle(op *cas.Op, w write, cmd goredis.Cmder) {
	r := &op.Result
	switch c := cmd.(type) {
	case *goredis.StringCmd: // a GET
		b, err := c.Bytes()
		switch {
		case err == goredis.Nil:
		case err != nil:
			r.Err = foreign(err)
		default:
			r.Data, r.Ver, r.Err = s.decode(op.Key, b)
			r.Found = r.Err == nil
		}
	case *goredis.Cmd: // a script
		reply, err := c.Result()
		if err == nil {
			err = s.result(op, w, reply)
		}
		if err != nil {
			*r = cas.Result{Err: foreign(err)}
		}
	}
}
