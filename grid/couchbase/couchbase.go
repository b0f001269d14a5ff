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
// Couchbase document ids are at most 250 bytes. Keys go through the key
// mapping (WithKeyMapping) first; an id that is still longer is rejected with
// a *KeyTooLongError before anything is sent.
package couchbase

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/couchbase/gocb/v2"

	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/core"
)

// MaxKeyLen is the longest document id Couchbase accepts, in bytes.
const MaxKeyLen = 250

// KeyTooLongError reports a document id longer than MaxKeyLen bytes.
type KeyTooLongError struct {
	Key string // the bucket key as given
	ID  string // the document id the key mapped to
}

// Unwrap returns core.ErrInvalidKey.
func (e *KeyTooLongError) Unwrap() error { return core.ErrInvalidKey }

// Error implements error.
func (e *KeyTooLongError) Error() string {
	return fmt.Sprintf("grid/couchbase: document id for key %.40q... is %d bytes; Couchbase allows at most %d (use WithKeyMapping to shorten keys)",
		e.Key, len(e.ID), MaxKeyLen)
}

// Store is a cas.Store on one Couchbase collection. It is safe for
// concurrent use.
type Store struct {
	coll *gocb.Collection
	id   func(key string) string
	tc   gocb.Transcoder
}

var _ cas.Store = (*Store)(nil)

// Option configures a Store.
type Option func(*Store) error

// WithKeyMapping sets the function that turns a bucket key into the document
// id: a prefix to share a collection with other data ("bucket::"+key), or a
// hash for keys that may exceed MaxKeyLen. It must be deterministic and
// injective. The default uses the key itself.
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
		coll: coll,
		id:   func(key string) string { return key },
		tc:   gocb.NewRawBinaryTranscoder(),
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
	var data []byte
	if err := res.Content(&data); err != nil {
		return nil, 0, false, fmt.Errorf("grid/couchbase: get %s: %w", core.RedactKey(key), err)
	}
	return data, cas.Version(res.Cas()), true, nil
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

// prepare maps key to its document id and derives the operation timeout from
// ctx's deadline (0, the cluster default, without one).
func (s *Store) prepare(ctx context.Context, key string) (id string, timeout time.Duration, err error) {
	id = s.id(key)
	if len(id) > MaxKeyLen {
		return "", 0, &KeyTooLongError{Key: key, ID: id}
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
