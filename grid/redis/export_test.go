package redis

import (
	"context"
	"time"

	"github.com/bucketgrid/bucketgrid/cas"
)

// Fallbacks returns how often s ran EVAL after EVALSHA answered NOSCRIPT.
func Fallbacks(s *Store) int64 { return s.fallbacks.Load() }

// InsertAs is Insert with the new version chosen by the caller, so a test can
// send the same write twice, as go-redis does when it resends a command.
func InsertAs(ctx context.Context, s *Store, key string, ver cas.Version, data []byte, ttl time.Duration) (bool, error) {
	op := cas.Op{Kind: cas.OpInsert, Key: key, Data: data, TTL: ttl}
	err := s.writeAs(ctx, &op, ver)
	return op.Result.Written, err
}

// TTLMillis is the PX argument written for ttl.
var TTLMillis = ttlMillis
