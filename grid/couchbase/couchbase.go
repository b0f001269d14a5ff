// Package couchbase is a cas.Store on a Couchbase collection, through the
// official Go SDK (github.com/couchbase/gocb/v2).
//
// Each bucket is one document holding the raw state bytes (RawBinaryTranscoder,
// no JSON). The document's CAS is the cas.Version: Insert creates the document
// (ErrDocumentExists is a lost race), Replace passes the CAS back
// (ErrCasMismatch and ErrDocumentNotFound are lost races). Every other failure
// — timeout, network, server error — is returned as an error, never as a lost
// race.
//
// # Expiry
//
// Every write sets the document's expiry explicitly: Couchbase clears the
// expiry of a document replaced without one, which is what ttl 0 (no expiry)
// wants, and any other ttl is rounded up to whole seconds, the server's
// resolution — so a ttl below one second becomes one second. Expired
// documents read as absent and are removed by the server; no sweep is needed.
//
// # Timeouts
//
// Each operation runs under its context: cancellation aborts it, and a
// deadline becomes the operation's timeout, overriding the cluster's default
// KV timeout (2.5 s unless configured) in either direction. Without a
// deadline the cluster's default applies.
//
// # Keys
//
// A key goes through the key mapping (WithKeyMapping) first; the document id
// it maps to must be what Couchbase Server holds: 1 to MaxKeyLen (250) bytes
// in the bucket's default collection, 1 to MaxCollectionKeyLen (246) bytes
// in any other collection (the collection's id takes the rest), valid
// UTF-8. The limit includes whatever prefix the mapping adds. A key whose id
// breaks the rule is refused before anything is sent, by CheckKey and by
// every method, with a *core.KeyError (errors.Is core.ErrInvalidKey) that
// never shows the key: the client's error, which cas.Executor returns as it
// is, never retried, never an outage, and an HTTP middleware answers 400.
// To accept longer client keys, hash them into the limit with
// bucketgrid.WithFitKeys(MaxKeyLen - len(prefix)). Errors of this package
// name keys only by core.RedactKey.
package couchbase

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/couchbase/gocb/v2"

	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/core"
)

// MaxKeyLen is the longest document id Couchbase Server accepts in a
// bucket's default collection, in bytes.
const MaxKeyLen = 250

// MaxCollectionKeyLen is the longest document id Couchbase Server accepts in
// a named collection, in bytes: 250 less the bytes of the collection id.
const MaxCollectionKeyLen = 246

// Store is a cas.Store on one Couchbase collection. It is safe for
// concurrent use.
type Store struct {
	coll   *gocb.Collection
	id     func(key string) string
	tc     gocb.Transcoder
	maxLen int // MaxKeyLen or MaxCollectionKeyLen
}

var (
	_ cas.Store      = (*Store)(nil)
	_ cas.KeyChecker = (*Store)(nil)
	_ cas.Writer     = (*Store)(nil)
	_ cas.Batcher    = (*Store)(nil)
)

// Option configures a Store.
type Option func(*Store) error

// WithKeyMapping sets the function that turns a bucket key into the document
// id: a prefix to share a collection with other data ("bucket::"+key). It
// must be deterministic and injective. The default uses the key itself. The
// key rule (see the package documentation) applies to the mapped id.
func WithKeyMapping(id func(key string) string) Option {
	return func(s *Store) error {
		if id == nil {
			return errors.New("grid/couchbase: nil key mapping")
		}
		s.id = id
		return nil
	}
}

// New returns a Store that keeps buckets in coll. It does not contact the
// cluster.
func New(coll *gocb.Collection, opts ...Option) (*Store, error) {
	if coll == nil {
		return nil, errors.New("grid/couchbase: nil collection")
	}
	s := &Store{
		coll:   coll,
		id:     func(key string) string { return key },
		tc:     gocb.NewRawBinaryTranscoder(),
		maxLen: MaxCollectionKeyLen,
	}
	if coll.ScopeName() == "_default" && coll.Name() == "_default" {
		s.maxLen = MaxKeyLen
	}
	for _, o := range opts {
		if err := o(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Get reads the bucket stored under key with its CAS. A missing or expired
// document is found=false with a nil error.
func (s *Store) Get(ctx context.Context, key string) ([]byte, cas.Version, bool, error) {
	id, timeout, err := s.prepare(ctx, key)
	if err != nil {
		return nil, 0, false, err
	}
	res, err := s.coll.Get(id, &gocb.GetOptions{Transcoder: s.tc, Context: ctx, Timeout: timeout})
	if errors.Is(err, gocb.ErrDocumentNotFound) {
		return nil, 0, false, nil
	}
	if err != nil {
		return nil, 0, false, s.fail(ctx, "get", key, err)
	}
	data, err := content(key, res)
	if err != nil {
		return nil, 0, false, err
	}
	return data, cas.Version(res.Cas()), true, nil
}

// content returns the raw state bytes of a document read for key. A
// document this store did not write (JSON, say, from another application
// under the same ids) is a corrupt record, an error wrapping
// core.ErrCorruptState: never taken for absent, nor for an outage.
func content(key string, res interface{ Content(any) error }) ([]byte, error) {
	var data []byte
	if err := res.Content(&data); err != nil {
		return nil, fmt.Errorf("grid/couchbase: get %s: not a bucket document (%w): %w", core.RedactKey(key), err, core.ErrCorruptState)
	}
	return data, nil
}

// Insert creates the bucket under key if it is absent (an expired document
// is absent). An existing document is a lost race: ok=false with a nil error.
func (s *Store) Insert(ctx context.Context, key string, data []byte, ttl time.Duration) (bool, error) {
	id, timeout, err := s.prepare(ctx, key)
	if err != nil {
		return false, err
	}
	_, err = s.coll.Insert(id, data, &gocb.InsertOptions{
		Expiry: expiry(ttl), Transcoder: s.tc, Context: ctx, Timeout: timeout,
	})
	if errors.Is(err, gocb.ErrDocumentExists) {
		return false, nil
	}
	if err != nil {
		return false, s.fail(ctx, "insert", key, err)
	}
	return true, nil
}

// Replace overwrites the bucket under key if its CAS still equals ver. A
// changed, deleted or expired document is a lost race: ok=false with a nil
// error.
func (s *Store) Replace(ctx context.Context, key string, data []byte, ver cas.Version, ttl time.Duration) (bool, error) {
	id, timeout, err := s.prepare(ctx, key)
	if err != nil {
		return false, err
	}
	if ver == 0 {
		// CAS 0 means "unconditional" to Couchbase, and the server never
		// hands it out, so no stored document can match it.
		return false, nil
	}
	_, err = s.coll.Replace(id, data, &gocb.ReplaceOptions{
		Cas: gocb.Cas(ver), Expiry: expiry(ttl), Transcoder: s.tc, Context: ctx, Timeout: timeout,
	})
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, gocb.ErrCasMismatch), errors.Is(err, gocb.ErrDocumentNotFound),
		errors.Is(err, gocb.ErrDocumentExists): // CAS mismatch as some servers report it
		return false, nil
	default:
		return false, s.fail(ctx, "replace", key, err)
	}
}

// Delete removes the bucket under key. Deleting an absent key is not an
// error.
func (s *Store) Delete(ctx context.Context, key string) error {
	id, timeout, err := s.prepare(ctx, key)
	if err != nil {
		return err
	}
	_, err = s.coll.Remove(id, &gocb.RemoveOptions{Context: ctx, Timeout: timeout})
	if err != nil && !errors.Is(err, gocb.ErrDocumentNotFound) {
		return s.fail(ctx, "delete", key, err)
	}
	return nil
}

// CheckKey reports whether the document id key maps to is one Couchbase
// Server holds (see the package documentation): nil, or a *core.KeyError.
// It does no I/O.
func (s *Store) CheckKey(key string) error {
	_, err := s.docID(key)
	return err
}

// docID maps key to its document id and checks the key rule.
func (s *Store) docID(key string) (string, error) {
	id := s.id(key)
	switch {
	case id == "":
		return "", core.InvalidKey(key, "maps to an empty document id")
	case len(id) > s.maxLen:
		return "", core.InvalidKey(key, fmt.Sprintf("maps to a document id of %d bytes, longer than Couchbase's %d", len(id), s.maxLen))
	case !utf8.ValidString(id):
		return "", core.InvalidKey(key, "maps to a document id that is not valid UTF-8")
	}
	return id, nil
}

// prepare maps key to its document id, checking the key rule, and derives
// the operation timeout from ctx's deadline (0, the cluster default, without
// one).
func (s *Store) prepare(ctx context.Context, key string) (id string, timeout time.Duration, err error) {
	if id, err = s.docID(key); err != nil {
		return "", 0, err
	}
	if err := ctx.Err(); err != nil {
		return "", 0, fmt.Errorf("grid/couchbase: %w", err)
	}
	if d, ok := ctx.Deadline(); ok {
		timeout = time.Until(d)
		if timeout <= 0 {
			return "", 0, fmt.Errorf("grid/couchbase: %w", context.DeadlineExceeded)
		}
	}
	return id, timeout, nil
}

// fail wraps an SDK error; when the context ended meanwhile, its error is
// kept in the chain so callers can test errors.Is(err, context.Canceled).
func (s *Store) fail(ctx context.Context, op, key string, err error) error {
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("grid/couchbase: %s %s: %w (%w)", op, core.RedactKey(key), err, cerr)
	}
	return fmt.Errorf("grid/couchbase: %s %s: %w", op, core.RedactKey(key), err)
}

// expiry turns a ttl into Couchbase's whole seconds, rounding up so that
// nothing expires early; 0 stays 0 (no expiry).
func expiry(ttl time.Duration) time.Duration {
	if ttl <= 0 {
		return 0
	}
	return (ttl + time.Second - 1).Truncate(time.Second)
}
