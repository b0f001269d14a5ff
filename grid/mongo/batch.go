package mongo

import (
	"context"
	"errors"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	mongodrv "go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/core"
)

// This file holds the store's optional extensions of cas.Store.
//
//   - cas.Writer: the store chooses every version it writes, so Write
//     reports it, and the executor writes the next check from memory,
//     without a read. A lost race is reported without the winner
//     (Result.Current false), so it costs a read: returning the winner in
//     the same step takes a findAndModify whose update is an aggregation
//     pipeline ($cond on the version), which FerretDB v1 — the only server
//     these tests can run — does not implement, and this package ships no
//     compare-and-swap it cannot test.
//   - cas.Batcher, on request (Batching): the reads of a batch are one
//     find by _id $in, its writes one unordered bulk write (one insert and
//     one update command). A bulk write says which inserts failed but only
//     how many updates matched; when fewer matched than were sent, a find
//     of their keys tells them apart by the random version each would have
//     written. An update whose write cannot be told from another client's
//     later one is an error (its outcome is unknown), never a guess. It is
//     not on by default: on FerretDB v1, the only server measured here,
//     every operation on 1,000 buckets costs the server about 50 ms of CPU
//     (its filters scan the collection), so batching cuts round trips by 8
//     and changes nothing (grid/mongo's BenchmarkKeys: 14–21 checks/s one
//     operation at a time, 15–18 batched, in two runs); on MongoDB a find
//     by $in and the filtered updates use the _id index, but that is
//     unmeasured here.

// Write performs op, an OpInsert or an OpReplace, and reports the version
// written.
func (s *Store) Write(ctx context.Context, op *cas.Op) error {
	var ver cas.Version
	var ok bool
	var err error
	switch op.Kind {
	case cas.OpInsert:
		ver, ok, err = s.insert(ctx, op.Key, op.Data, op.TTL)
	case cas.OpReplace:
		ver, ok, err = s.replace(ctx, op.Key, op.Data, op.Ver, op.TTL)
	default:
		return errors.New("grid/mongo: not a write")
	}
	op.Result = cas.Result{}
	if err != nil {
		return err
	}
	if ok {
		op.Result.Written, op.Result.Ver = true, ver
	}
	return nil
}

// Batching is a Store that is also a cas.Batcher: cas.New(store.Batching())
// pipelines the operations of concurrent checks on different keys (see
// cas.WithPipelining) in shared finds and bulk writes. See the note on
// FerretDB above.
type Batching struct{ *Store }

var _ cas.Batcher = Batching{}

// Batching returns s as a Batching store.
func (s *Store) Batching() Batching { return Batching{s} }

// Batch performs ops with at most one find, one bulk write and one more
// find (see above); an insert over an expired document costs one more
// round trip of its own. Each op's outcome is its own.
func (b Batching) Batch(ctx context.Context, ops []*cas.Op) error {
	s := b.Store
	if err := ctx.Err(); err != nil {
		return err
	}
	var gets, inserts, replaces []*cas.Op
	for _, op := range ops {
		op.Result = cas.Result{}
		if err := s.CheckKey(op.Key); err != nil {
			op.Result.Err = err
			continue
		}
		switch op.Kind {
		case cas.OpGet:
			gets = append(gets, op)
		case cas.OpInsert:
			inserts = append(inserts, op)
		case cas.OpReplace:
			replaces = append(replaces, op)
		default:
			op.Result.Err = errors.New("grid/mongo: unknown operation")
		}
	}
	if len(gets) > 0 {
		s.readAll(ctx, gets)
	}
	if len(inserts)+len(replaces) > 0 {
		s.writeAll(ctx, inserts, replaces)
	}
	return nil
}

// idKey returns a map key for a document id: its BSON type and bytes.
func idKey(id any) (string, error) {
	t, b, err := bson.MarshalValue(id)
	if err != nil {
		return "", err
	}
	return string(rune(t)) + string(b), nil
}

// findAll reads the documents of ops' keys in one find and returns them by
// idKey.
func (s *Store) findAll(ctx context.Context, ops []*cas.Op) (map[string]bson.Raw, error) {
	ids := make(bson.A, len(ops))
	for i, op := range ops {
		ids[i] = s.id(op.Key)
	}
	cur, err := s.coll.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}})
	if err != nil {
		return nil, err
	}
	defer cur.Close(context.WithoutCancel(ctx))
	docs := make(map[string]bson.Raw, len(ops))
	for cur.Next(ctx) {
		rv := cur.Current.Lookup("_id")
		docs[string(rune(rv.Type))+string(rv.Value)] = append(bson.Raw(nil), cur.Current...)
	}
	return docs, cur.Err()
}

// readAll reads ops, each an OpGet, in one find.
func (s *Store) readAll(ctx context.Context, ops []*cas.Op) {
	docs, err := s.findAll(ctx, ops)
	for _, op := range ops {
		if err != nil {
			op.Result.Err = fmt.Errorf("grid/mongo: get %s: %w", core.RedactKey(op.Key), err)
			continue
		}
		k, kerr := idKey(s.id(op.Key))
		if kerr != nil {
			op.Result.Err = kerr
			continue
		}
		if raw, ok := docs[k]; ok {
			r := &op.Result
			r.Data, r.Ver, r.Found, r.Err = s.decode(op.Key, raw)
		}
	}
}

// writeAll writes inserts and replaces in one unordered bulk write.
func (s *Store) writeAll(ctx context.Context, inserts, replaces []*cas.Op) {
	now := s.now()
	ops := append(append([]*cas.Op(nil), inserts...), replaces...)
	vers := make([]int64, len(ops))
	docs := make([]bson.D, len(ops))
	models := make([]mongodrv.WriteModel, len(ops))
	for i, op := range ops {
		vers[i] = newVersion()
		docs[i] = s.doc(s.id(op.Key), op.Data, vers[i], op.TTL, now)
		if op.Kind == cas.OpInsert {
			models[i] = mongodrv.NewInsertOneModel().SetDocument(docs[i])
		} else {
			models[i] = mongodrv.NewReplaceOneModel().SetFilter(s.replaceFilter(op.Key, op.Ver, now)).SetReplacement(docs[i])
		}
	}
	res, err := s.coll.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false))
	failed := make([]error, len(ops))
	var bwe mongodrv.BulkWriteException
	switch {
	case err == nil:
	case errors.As(err, &bwe) && bwe.WriteConcernError == nil:
		for _, we := range bwe.WriteErrors {
			if we.Index >= 0 && we.Index < len(ops) {
				failed[we.Index] = we
			}
		}
	default: // the outcome of every write is unknown
		for _, op := range ops {
			op.Result.Err = fmt.Errorf("grid/mongo: bulk write of %s: %w", core.RedactKey(op.Key), err)
		}
		return
	}
	sent := 0 // replaces the server took (matched or not)
	for i, op := range ops {
		switch {
		case failed[i] != nil && op.Kind == cas.OpInsert && mongodrv.IsDuplicateKeyError(failed[i]):
			// The key exists, live or expired: take over an expired one.
			ok, err := s.overExpired(ctx, op.Key, docs[i], now)
			op.Result = cas.Result{Written: ok, Err: err}
			if ok {
				op.Result.Ver = cas.Version(vers[i])
			}
		case failed[i] != nil:
			op.Result.Err = fmt.Errorf("grid/mongo: bulk write of %s: %w", core.RedactKey(op.Key), failed[i])
		case op.Kind == cas.OpInsert:
			op.Result.Written, op.Result.Ver = true, cas.Version(vers[i])
		default:
			sent++
		}
	}
	if sent == 0 {
		return
	}
	if res != nil && int(res.MatchedCount) == sent {
		for i, op := range ops {
			if op.Kind == cas.OpReplace && failed[i] == nil {
				op.Result.Written, op.Result.Ver = true, cas.Version(vers[i])
			}
		}
		return
	}
	s.settleReplaces(ctx, ops, vers, failed, res)
}

// settleReplaces tells, after a bulk write in which fewer replaces matched
// than were sent, which ones wrote: those whose key now holds the version
// they wrote. When those found account for every match, the others lost;
// otherwise a replace not found may have written and been overwritten
// since, and its outcome is unknown: an error.
func (s *Store) settleReplaces(ctx context.Context, ops []*cas.Op, vers []int64, failed []error, res *mongodrv.BulkWriteResult) {
	var pending []*cas.Op
	var idx []int
	for i, op := range ops {
		if op.Kind == cas.OpReplace && failed[i] == nil {
			pending, idx = append(pending, op), append(idx, i)
		}
	}
	docs, err := s.findAll(ctx, pending)
	found := 0
	wrote := make([]bool, len(pending))
	if err == nil {
		for j, op := range pending {
			k, _ := idKey(s.id(op.Key))
			if raw, ok := docs[k]; ok {
				if v, ok := raw.Lookup(s.version).AsInt64OK(); ok && v == vers[idx[j]] {
					wrote[j] = true
					found++
				}
			}
		}
	}
	matched := 0
	if res != nil {
		matched = int(res.MatchedCount)
	}
	for j, op := range pending {
		switch {
		case wrote[j]:
			op.Result.Written, op.Result.Ver = true, cas.Version(vers[idx[j]])
		case err != nil:
			op.Result.Err = fmt.Errorf("grid/mongo: replace %s in a batch: outcome unknown: %w", core.RedactKey(op.Key), err)
		case found == matched: // every match is accounted for: this one lost
		default:
			op.Result.Err = fmt.Errorf("grid/mongo: replace %s in a batch: outcome unknown (its write, if any, was overwritten before it could be told)", core.RedactKey(op.Key))
		}
	}
}
