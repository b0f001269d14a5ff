package bucketgrid

import (
	"context"

	"github.com/bucketgrid/bucketgrid/core/wire"
)

// Executor runs core requests against the stored bucket of a key: where the
// pure function wire.Process runs and how its result is stored atomically.
// The cas package, the Olric grid and user backends implement it; the Manager
// adds everything else (configuration on demand, recovery, replacement,
// listeners).
//
// Execute must apply the whole request atomically with respect to every other
// request on the same key, and return the response that wire.Process
// produced. It returns an error only when the request could not be carried
// out (an outage, a timeout, a lost race it gave up on), or when the key is
// one its storage cannot hold: then, before any I/O, an error wrapping
// core.ErrInvalidKey (see core.InvalidKey), which callers treat as the client's
// error, never as an outage. Statuses such as wire.StatusNotFound are
// answers, not errors.
//
// An executor may also have any of three methods a Manager's degraded mode
// (see Degrade) looks for:
//   - LiveInstances() int: the number of live instances sharing its
//     buckets, at least 1 (a grid's members, a cas/presence Counter's
//     count); Degrade divides the limit by it when Degrade.Instances is nil.
//   - Route(key string) string: where key's bucket is executed now ("" when
//     unknown), for keys that live on different servers; Degrade keeps a
//     circuit breaker per route, so an owner that crashed degrades only its
//     own keys.
//   - Outage(err error) bool: whether an error of Execute may be an outage,
//     for errors that are not although Degrade cannot tell (a CAS executor
//     that gave up on a key too contended to update); Degrade decides
//     locally only when it reports true.
type Executor interface {
	Execute(ctx context.Context, key string, req wire.Request) (wire.Response, error)
	// Remove deletes the stored bucket of key; removing an absent key is not
	// an error.
	Remove(ctx context.Context, key string) error
}
