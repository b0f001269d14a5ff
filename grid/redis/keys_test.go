package redis_test

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/bucketgrid/bucketgrid"
	redis "github.com/bucketgrid/bucketgrid/grid/redis"
	"github.com/bucketgrid/bucketgrid/internal/harness/keyrule"
)

// commandCounter is a go-redis hook counting the commands sent.
type commandCounter struct{ n atomic.Int64 }

func (c *commandCounter) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (c *commandCounter) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

func (c *commandCounter) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// TestKeyRuleThroughMiddleware: a key making a Redis key one byte over
// MaxKeyLen is answered 400 and costs the store nothing; one byte less is
// limited exactly; with WithFitKeys the long key is too.
func TestKeyRuleThroughMiddleware(t *testing.T) {
	s, _ := newStore(t)
	over := strings.Repeat("k", redis.MaxKeyLen-len(runPrefix)+1)
	res := keyrule.Through(s, keyrule.Raw, over, 10)
	if want := slices.Repeat([]int{400}, 10); !slices.Equal(res.Statuses, want) || res.Calls != 0 || res.Stats.FailedOpen != 0 {
		t.Errorf("Redis key of %d bytes: statuses %v, %d store calls, stats %+v; want 400 each and no store call",
			len(runPrefix)+len(over), res.Statuses, res.Calls, res.Stats)
	}
	res = keyrule.Through(s, keyrule.Raw, over[1:], 4)
	if !slices.Equal(res.Statuses, []int{200, 200, 429, 429}) {
		t.Errorf("Redis key of %d bytes: statuses %v, want 200 200 429 429", redis.MaxKeyLen, res.Statuses)
	}
	res = keyrule.Through(s, keyrule.Raw, over, 4, bucketgrid.WithFitKeys(redis.MaxKeyLen-len(runPrefix)))
	if !slices.Equal(res.Statuses, []int{200, 200, 429, 429}) {
		t.Errorf("WithFitKeys: statuses %v, want 200 200 429 429", res.Statuses)
	}
}

// TestKeyRule: every method refuses a key over the rule with a
// *core.KeyError that does not show the key, and no command is sent.
func TestKeyRule(t *testing.T) {
	c := newClient(t, redisAddr(t))
	var count commandCounter
	c.AddHook(&count)
	s := redis.New(c, redis.WithPrefix(runPrefix))
	ctx := context.Background()
	key := strings.Repeat("x", redis.MaxKeyLen-len(runPrefix)+1)
	if err := keyrule.Refused(ctx, s, key); err != nil {
		t.Fatal(err)
	}
	if n := count.n.Load(); n != 0 {
		t.Fatalf("%d commands sent for a key over the rule", n)
	}
	if _, _, _, err := s.Get(ctx, key[1:]); err != nil || count.n.Load() == 0 {
		t.Fatalf("a key at the limit: %v after %d commands, want a real read", err, count.n.Load())
	}
}
