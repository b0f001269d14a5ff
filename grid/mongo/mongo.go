// Package mongo is a cas.Store on a MongoDB collection, through the official
// Go driver (go.mongodb.org/mongo-driver/v2).
//
// Each bucket is one document:
//
//	{_id: key, state: BinData, version: int64, expiresAt: date}
//
// Insert is InsertOne (a duplicate _id is a lost race); Replace is ReplaceOne
// filtered on {_id, version} that writes a new version (no match is a lost
// race).
// Every other failure — network, timeout, server error — is returned as an
// error, never as a lost race. (Bucket4j's MongoDB backend reports every write
// error as a lost race, so an outage turns into an endless retry loop; this
// package does not.)
//
// # Expiry
//
// A write with a positive ttl sets expiresAt to now+ttl, rounded up to
// BSON's millisecond precision (never early); a write with ttl 0 removes it. An expired document reads as
// absent, a Replace of it is a lost race and an Insert over it succeeds, so
// expiry is exact whether or not the server removes the document. MongoDB
// removes expired documents itself once EnsureIndexes has created a TTL index
// (its monitor runs about once a minute). Servers without TTL indexes, such as
// FerretDB, leave them in place: call RemoveExpired from time to time.
//
// # Versions
//
// Every write stores a new random positive int64 as the version, not a
// counter: a client that read a document before it was deleted or expired
// and re-created must not be able to overwrite the new incarnation with its
// stale version, and a version names one write, which lets a batch tell its
// own writes from others' (see Batching).
//
// # Atomicity, and FerretDB
//
// The protocol needs the server to apply a filtered ReplaceOne atomically, as
// MongoDB does for any single-document write. FerretDB v1 does not across
// connections: it evaluates the filter, then writes by _id alone, so two
// connections can both "win" the same version and one update is lost. Through
// a single connection (a client with maxPoolSize=1) it is exact. This
// package's tests prove both: the TCK's atomicity probe run against FerretDB
// through a pool of 8 connections detects the lost updates (evidence that the
// kit catches a real, third-party non-atomic server), and through one
// connection finds none. Run FerretDB with maxPoolSize=1, or use MongoDB.
//
// # Keys
//
// A key must be valid UTF-8, since BSON strings are (FerretDB stores an
// invalid one as U+FFFD and never finds it again), hold no NUL byte
// (FerretDB's PostgreSQL handler keeps documents as jsonb, which cannot
// hold U+0000, and fails such an insert with an InternalError that would
// read as an outage), and be at most MaxKeyLen
// (1000) bytes: under the Index Key Limit of MongoDB before 4.2 (an _id
// index entry must be under 1024 bytes), and far under the 16 MiB document
// limit of later versions; a bound of the store's own, so a client cannot
// make it hold megabytes per bucket. The rule applies to the key as given,
// whatever WithKeyMapping makes of it. A key that breaks it is refused
// before anything is sent, by CheckKey and by every method, with a
// *core.KeyError (errors.Is core.ErrInvalidKey) that never shows the key:
// the client's error, which cas.Executor returns as it is, never retried,
// never an outage, and an HTTP middleware answers 400. To accept any client
// key, hash the others into the rule with bucketgrid.WithFitKeys(MaxKeyLen).
// Errors of this package name keys only by core.RedactKey.
package mongo

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
	"unicode/utf8"

	"go.mongodb.org/mongo-driver/v2/bson"
	mongodrv "go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/core"
)

// codeNotImplemented is the server error FerretDB returns for TTL indexes.
const codeNotImplemented = 238

// Store is a cas.Store on one MongoDB collection. It is safe for concurrent
// use; its methods honour the context's deadline and cancellation.
type Store struct {
	coll    *mongodrv.Collection
	state   string
	version string
	expires string
	id      func(key string) any
	clock   clock.Clock
}

var (
	_ cas.Store      = (*Store)(nil)
	_ cas.KeyChecker = (*Store)(nil)
	_ cas.Writer     = (*Store)(nil)
)

// MaxKeyLen is the longest key the store holds, in bytes (see the package
// documentation).
const MaxKeyLen = 1000

// CheckKey reports whether the store holds key (see the package
// documentation): nil, or a *core.KeyError. It does no I/O.
func (s *Store) CheckKey(key string) error {
	switch {
	case len(key) > MaxKeyLen:
		return core.InvalidKey(key, fmt.Sprintf("longer than %d bytes", MaxKeyLen))
	case !utf8.ValidString(key):
		return core.InvalidKey(key, "not valid UTF-8")
	case strings.IndexByte(key, 0) >= 0:
		return core.InvalidKey(key, "contains a NUL byte")
	}
	return nil
}

// Option configures a Store.
type Option func(*Store) error

// WithFieldNames sets the names of the state, version and expiry fields of
// the bucket documents. The defaults are "state", "version" and "expiresAt".
// Names must be non-empty, distinct, not "_id" and not start with '$'.
func WithFieldNames(state, version, expiresAt string) Option {
	return func(s *Store) error {
		names := []string{state, version, expiresAt}
		for i, n := range names {
			if n == "" || n == "_id" || n[0] == '$' {
				return fmt.Errorf("grid/mongo: invalid field name %q", n)
			}
			for _, m := range names[:i] {
				if m == n {
					return fmt.Errorf("grid/mongo: field name %q used twice", n)
				}
			}
		}
		s.state, s.version, s.expires = state, version, expiresAt
		return nil
	}
}

// WithKeyMapping sets the function that turns a bucket key into the
// document's _id, for collections whose ids are not strings (an ObjectID, a
// number, a compound document). The function must be deterministic and
// injective. The default uses the key itself.
func WithKeyMapping(id func(key string) any) Option {
	return func(s *Store) error {
		if id == nil {
			return errors.New("grid/mongo: nil key mapping")
		}
		s.id = id
		return nil
	}
}

// WithClock sets the clock that decides expiry: expiresAt is written as
// now+ttl and a document reads as absent once now has reached it. The
// default is clock.Wall(). c must read Unix time (c.Wall() true), since
// expiresAt is a BSON date; a nil or non-wall clock is an error. Clients of
// one collection should agree on the time.
func WithClock(c clock.Clock) Option {
	return func(s *Store) error {
		if c == nil || !c.Wall() {
			return errors.New("grid/mongo: the clock must be a wall clock (Unix time)")
		}
		s.clock = c
		return nil
	}
}

// now returns the store's clock reading.
func (s *Store) now() time.Time { return time.Unix(0, s.clock.Now()) }

// New returns a Store that keeps buckets in coll. It does not contact the
// server; call EnsureIndexes once at startup to have expired documents
// removed by the server.
func New(coll *mongodrv.Collection, opts ...Option) (*Store, error) {
	if coll == nil {
		return nil, errors.New("grid/mongo: nil collection")
	}
	s := &Store{
		coll:    coll,
		state:   "state",
		version: "version",
		expires: "expiresAt",
		id:      func(key string) any { return key },
		clock:   clock.Wall(),
	}
	for _, o := range opts {
		if err := o(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// EnsureIndexes creates the TTL index on the expiry field, so that the server
// removes expired documents. A server without TTL indexes (FerretDB answers
// NotImplemented, code 238) gets a plain index on that field instead, which
// keeps RemoveExpired cheap; that is not an error, and expiry stays exact
// either way. EnsureIndexes is idempotent.
func (s *Store) EnsureIndexes(ctx context.Context) error {
	keys := bson.D{{Key: s.expires, Value: 1}}
	_, err := s.coll.Indexes().CreateOne(ctx, mongodrv.IndexModel{
		Keys:    keys,
		Options: options.Index().SetExpireAfterSeconds(0),
	})
	if err == nil {
		return nil
	}
	if !hasCode(err, codeNotImplemented) {
		return fmt.Errorf("grid/mongo: create TTL index: %w", err)
	}
	_, err = s.coll.Indexes().CreateOne(ctx, mongodrv.IndexModel{Keys: keys})
	if err != nil && !hasCode(err, codeNotImplemented) {
		return fmt.Errorf("grid/mongo: create expiry index: %w", err)
	}
	return nil
}

// RemoveExpired deletes up to limit documents whose expiry has passed and
// returns how many it deleted; limit <= 0 means no limit. A document written
// again after it was selected is left alone. Only servers without TTL indexes
// need it, but it is harmless on any.
func (s *Store) RemoveExpired(ctx context.Context, limit int) (int, error) {
	now := bson.NewDateTimeFromTime(s.now())
	expired := bson.D{{Key: s.expires, Value: bson.D{{Key: "$lte", Value: now}}}}
	if limit <= 0 {
		res, err := s.coll.DeleteMany(ctx, expired)
		if err != nil {
			return 0, fmt.Errorf("grid/mongo: remove expired: %w", err)
		}
		return int(res.DeletedCount), nil
	}
	cur, err := s.coll.Find(ctx, expired, options.Find().
		SetLimit(int64(limit)).
		SetProjection(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return 0, fmt.Errorf("grid/mongo: remove expired: %w", err)
	}
	var ids []any
	for cur.Next(ctx) {
		ids = append(ids, cur.Current.Lookup("_id"))
	}
	err = cur.Err()
	_ = cur.Close(context.WithoutCancel(ctx))
	if err != nil {
		return 0, fmt.Errorf("grid/mongo: remove expired: %w", err)
	}
	if len(ids) == 0 {
		return 0, nil
	}
	// The expiry condition is repeated so that a document re-inserted since
	// the Find survives.
	res, err := s.coll.DeleteMany(ctx, bson.D{
		{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}},
		expired[0],
	})
	if err != nil {
		return 0, fmt.Errorf("grid/mongo: remove expired: %w", err)
	}
	return int(res.DeletedCount), nil
}

// Get reads the bucket stored under key. A missing or expired document is
// found=false with a nil error.
func (s *Store) Get(ctx context.Context, key string) ([]byte, cas.Version, bool, error) {
	if err := s.CheckKey(key); err != nil {
		return nil, 0, false, err
	}
	raw, err := s.coll.FindOne(ctx, bson.D{{Key: "_id", Value: s.id(key)}}).Raw()
	if errors.Is(err, mongodrv.ErrNoDocuments) {
		return nil, 0, false, nil
	}
	if err != nil {
		return nil, 0, false, fmt.Errorf("grid/mongo: get %s: %w", core.RedactKey(key), err)
	}
	data, ver, found, err := s.decode(key, raw)
	return data, ver, found, err
}

// decode reads a bucket document: absent when it has expired.
func (s *Store) decode(key string, raw bson.Raw) ([]byte, cas.Version, bool, error) {
	if exp, ok := raw.Lookup(s.expires).DateTimeOK(); ok && exp <= s.now().UnixMilli() {
		return nil, 0, false, nil
	}
	_, data, ok := raw.Lookup(s.state).BinaryOK()
	if !ok {
		return nil, 0, false, fmt.Errorf("grid/mongo: get %s: field %q is not binary data: %w", core.RedactKey(key), s.state, core.ErrCorruptState)
	}
	ver, ok := raw.Lookup(s.version).AsInt64OK()
	if !ok {
		return nil, 0, false, fmt.Errorf("grid/mongo: get %s: field %q is not an integer: %w", core.RedactKey(key), s.version, core.ErrCorruptState)
	}
	return data, cas.Version(ver), true, nil
}

// Insert creates the bucket under key if it is absent or expired. An existing
// live document is a lost race: ok=false with a nil error.
func (s *Store) Insert(ctx context.Context, key string, data []byte, ttl time.Duration) (bool, error) {
	op := cas.Op{Kind: cas.OpInsert, Key: key, Data: data, TTL: ttl}
	err := s.Write(ctx, &op)
	return op.Result.Written, err
}

// insert is Insert reporting the version written.
func (s *Store) insert(ctx context.Context, key string, data []byte, ttl time.Duration) (cas.Version, bool, error) {
	if err := s.CheckKey(key); err != nil {
		return 0, false, err
	}
	id := s.id(key)
	// A document deleted (by the TTL monitor, say) between the failed insert
	// and the replace of the expired one would read as a lost race although
	// the key is free; a second round settles it.
	for range 2 {
		now := s.now()
		ver := newVersion()
		doc := s.doc(id, data, ver, ttl, now)
		_, err := s.coll.InsertOne(ctx, doc)
		if err == nil {
			return cas.Version(ver), true, nil
		}
		if !mongodrv.IsDuplicateKeyError(err) {
			return 0, false, fmt.Errorf("grid/mongo: insert %s: %w", core.RedactKey(key), err)
		}
		ok, err := s.overExpired(ctx, key, doc, now)
		if err != nil || ok {
			return cas.Version(ver), ok, err
		}
		if ctx.Err() != nil {
			return 0, false, fmt.Errorf("grid/mongo: insert %s: %w", core.RedactKey(key), ctx.Err())
		}
	}
	return 0, false, nil
}

// overExpired writes doc over key's document if it expired by now,
// atomically against other writers: only one of them can still match
// expiresAt <= now.
func (s *Store) overExpired(ctx context.Context, key string, doc bson.D, now time.Time) (bool, error) {
	res, err := s.coll.ReplaceOne(ctx, bson.D{
		{Key: "_id", Value: s.id(key)},
		{Key: s.expires, Value: bson.D{{Key: "$lte", Value: bson.NewDateTimeFromTime(now)}}},
	}, doc)
	if err != nil {
		return false, fmt.Errorf("grid/mongo: insert %s over expired: %w", core.RedactKey(key), err)
	}
	return res.MatchedCount > 0, nil
}

// Replace overwrites the bucket under key if its version is still ver and it
// has not expired. Otherwise — changed, deleted or expired — it is a lost
// race: ok=false with a nil error.
func (s *Store) Replace(ctx context.Context, key string, data []byte, ver cas.Version, ttl time.Duration) (bool, error) {
	op := cas.Op{Kind: cas.OpReplace, Key: key, Data: data, Ver: ver, TTL: ttl}
	err := s.Write(ctx, &op)
	return op.Result.Written, err
}

// replaceFilter matches key's document while it holds version ver and has
// not expired by now.
func (s *Store) replaceFilter(key string, ver cas.Version, now time.Time) bson.D {
	return bson.D{
		{Key: "_id", Value: s.id(key)},
		{Key: s.version, Value: int64(ver)},
		{Key: "$or", Value: bson.A{
			bson.D{{Key: s.expires, Value: bson.D{{Key: "$exists", Value: false}}}},
			bson.D{{Key: s.expires, Value: bson.D{{Key: "$gt", Value: bson.NewDateTimeFromTime(now)}}}},
		}},
	}
}

// replace is Replace reporting the version written.
func (s *Store) replace(ctx context.Context, key string, data []byte, ver cas.Version, ttl time.Duration) (cas.Version, bool, error) {
	if err := s.CheckKey(key); err != nil {
		return 0, false, err
	}
	now, nv := s.now(), newVersion()
	res, err := s.coll.ReplaceOne(ctx, s.replaceFilter(key, ver, now), s.doc(s.id(key), data, nv, ttl, now))
	if err != nil {
		return 0, false, fmt.Errorf("grid/mongo: replace %s: %w", core.RedactKey(key), err)
	}
	return cas.Version(nv), res.MatchedCount > 0, nil
}

// newVersion returns a random positive int64.
func newVersion() int64 { return 1 + rand.Int64N(1<<62) }

// Delete removes the bucket under key. Deleting an absent key is not an
// error.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := s.CheckKey(key); err != nil {
		return err
	}
	if _, err := s.coll.DeleteOne(ctx, bson.D{{Key: "_id", Value: s.id(key)}}); err != nil {
		return fmt.Errorf("grid/mongo: delete %s: %w", core.RedactKey(key), err)
	}
	return nil
}

// doc builds a whole bucket document; a zero ttl leaves out the expiry field.
func (s *Store) doc(id any, data []byte, ver int64, ttl time.Duration, now time.Time) bson.D {
	d := bson.D{
		{Key: "_id", Value: id},
		{Key: s.state, Value: bson.Binary{Subtype: bson.TypeBinaryGeneric, Data: data}},
		{Key: s.version, Value: ver},
	}
	if ttl > 0 {
		// BSON dates count milliseconds; round up so that a sub-millisecond
		// ttl does not read as expired at once.
		ms := (now.Add(ttl).UnixNano() + int64(time.Millisecond) - 1) / int64(time.Millisecond)
		d = append(d, bson.E{Key: s.expires, Value: bson.DateTime(ms)})
	}
	return d
}

func hasCode(err error, code int) bool {
	var se mongodrv.ServerError
	return errors.As(err, &se) && se.HasErrorCode(code)
}
