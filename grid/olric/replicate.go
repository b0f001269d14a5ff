package olric

import (
	"context"
	"time"

	"github.com/bucketgrid/bucketgrid/grid/olric/internal/frame"
	olricdb "github.com/olric-data/olric"
)

// replicate writes back a bucket state the owner read from Olric and did
// not change, and caches it, once per ownership epoch (the cache then
// answers the bucket's next reads). Olric copies a partition to a new
// backup only as it is written: after a member leaves, a bucket that is
// merely read (a drained bucket refusing requests) would otherwise keep a
// single copy, and the next member to leave could take it, resetting the
// bucket to full. expiresAt is the entry's expiry in Unix milliseconds (0
// for none); the write keeps it. failed reports an error to answer with.
func (oe *ownerExec) replicate(ctx context.Context, st *stripe, key string, state []byte, expiresAt int64, epoch uint64) (o outcome, failed bool) {
	m := oe.m
	var err error
	var expires int64
	switch {
	case expiresAt == 0:
		err = m.node.dm.Put(ctx, key, state)
	case time.Until(time.UnixMilli(expiresAt)) > 0:
		err = m.node.dm.Put(ctx, key, state, olricdb.PXAT(time.Duration(expiresAt)*time.Millisecond))
		expires = m.mono() + int64(time.Until(time.UnixMilli(expiresAt)))
	default:
		return outcome{}, false // expiring now: leave it to Olric
	}
	if err != nil {
		return outcome{kind: frame.KindError, err: err, retry: true}, true
	}
	if m.cfg.CacheEntries > 0 {
		oe.cache(st, key, cached{state: state, epoch: epoch, expires: expires})
	}
	return outcome{}, false
}
