package couchbase

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/couchbase/gocb/v2"

	"github.com/bucketgrid/bucketgrid/cas"
)

// This file holds the store's optional extensions of cas.Store.
//
//   - cas.Writer: every mutation returns the document's new CAS, which is
//     the version Get reports next, so Write reports it and the executor
//     writes the next check from memory, without a Get. A lost race is
//     reported without the winner (Result.Current false): the KV protocol
//     refuses a stale CAS with no value, and a Get sent behind the write
//     in the same pipeline is neither atomic with it nor, with unordered
//     execution, certain to run after it. So a lost race costs a Get.
//   - cas.Batcher: Collection.Do sends many KV operations at once, each to
//     its node, pipelined on the SDK's connections; each op has its own
//     result and error. Do takes no context: its timeout comes from ctx's
//     deadline, and a context cancelled without one does not stop a batch
//     in flight (the executor's callers still return at their own
//     deadlines).

// Write performs op, an OpInsert or an OpReplace, and reports the CAS the
// write produced.
func (s *Store) Write(ctx context.Context, op *cas.Op) error {
	id, timeout, err := s.prepare(ctx, op.Key)
	if err != nil {
		return err
	}
	var res *gocb.MutationResult
	r := &op.Result
	*r = cas.Result{}
	switch op.Kind {
	case cas.OpInsert:
		res, err = s.coll.Insert(id, op.Data, &gocb.InsertOptions{
			Expiry: expiry(op.TTL), Transcoder: s.tc, Context: ctx, Timeout: timeout,
		})
	case cas.OpReplace:
		if op.Ver == 0 {
			return nil // see Replace
		}
		res, err = s.coll.Replace(id, op.Data, &gocb.ReplaceOptions{
			Cas: gocb.Cas(op.Ver), Expiry: expiry(op.TTL), Transcoder: s.tc, Context: ctx, Timeout: timeout,
		})
	default:
		return errors.New("grid/couchbase: not a write")
	}
	if err != nil {
		if lostRace(op.Kind, err) {
			return nil
		}
		return s.fail(ctx, kindName(op.Kind), op.Key, err)
	}
	r.Written, r.Ver = true, cas.Version(res.Cas())
	return nil
}

// lostRace reports whether err, from a write of kind, is a lost race.
func lostRace(kind cas.OpKind, err error) bool {
	if kind == cas.OpInsert {
		return errors.Is(err, gocb.ErrDocumentExists)
	}
	return errors.Is(err, gocb.ErrCasMismatch) || errors.Is(err, gocb.ErrDocumentNotFound) ||
		errors.Is(err, gocb.ErrDocumentExists) // CAS mismatch as some servers report it
}

func kindName(k cas.OpKind) string {
	switch k {
	case cas.OpGet:
		return "get"
	case cas.OpInsert:
		return "insert"
	}
	return "replace"
}

// Batch performs ops with one Collection.Do: each op's outcome is its own,
// as Get and Write would report it. A key this store refuses is that op's
// error, and it is not sent.
func (s *Store) Batch(ctx context.Context, ops []*cas.Op) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var timeout time.Duration
	if d, ok := ctx.Deadline(); ok {
		if timeout = time.Until(d); timeout <= 0 {
			return context.DeadlineExceeded
		}
	}
	bulk := make([]gocb.BulkOp, 0, len(ops))
	sent := make([]*cas.Op, 0, len(ops))
	for _, op := range ops {
		op.Result = cas.Result{}
		id, err := s.docID(op.Key)
		if err != nil {
			op.Result.Err = err
			continue
		}
		var b gocb.BulkOp
		switch op.Kind {
		case cas.OpGet:
			b = &gocb.GetOp{ID: id}
		case cas.OpInsert:
			b = &gocb.InsertOp{ID: id, Value: op.Data, Expiry: expiry(op.TTL)}
		case cas.OpReplace:
			if op.Ver == 0 {
				continue // a lost race, see Replace
			}
			b = &gocb.ReplaceOp{ID: id, Value: op.Data, Cas: gocb.Cas(op.Ver), Expiry: expiry(op.TTL)}
		default:
			op.Result.Err = errors.New("grid/couchbase: unknown operation")
			continue
		}
		bulk, sent = append(bulk, b), append(sent, op)
	}
	if len(bulk) == 0 {
		return nil
	}
	if err := s.coll.Do(bulk, &gocb.BulkOpOptions{Transcoder: s.tc, Timeout: timeout}); err != nil {
		return fmt.Errorf("grid/couchbase: batch of %d operations: %w", len(bulk), err)
	}
	for i, b := range bulk {
		op, r := sent[i], &sent[i].Result
		var err error
		switch b := b.(type) {
		case *gocb.GetOp:
			switch err = b.Err; {
			case errors.Is(err, gocb.ErrDocumentNotFound):
				err = nil
			case err == nil:
				var data []byte
				if data, err = content(op.Key, b.Result); err == nil {
					r.Found, r.Data, r.Ver = true, data, cas.Version(b.Result.Cas())
				}
			}
		case *gocb.InsertOp:
			if err = b.Err; err == nil {
				r.Written, r.Ver = true, cas.Version(b.Result.Cas())
			}
		case *gocb.ReplaceOp:
			if err = b.Err; err == nil {
				r.Written, r.Ver = true, cas.Version(b.Result.Cas())
			}
		}
		if err != nil && (op.Kind == cas.OpGet || !lostRace(op.Kind, err)) {
			r.Err = s.fail(ctx, kindName(op.Kind), op.Key, err)
		}
	}
	return nil
}
