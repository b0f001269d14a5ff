// Command newbackend runs bucketgrid on the Redis store of grid/redis, the
// worked example of adding a backend (see README.md):
//
//	go run ./examples/newbackend
//
// It connects to REDIS_ADDR (default 127.0.0.1:6379), puts two Managers — two
// nodes of an application — over one store, and checks a few things a user
// would: the nodes share one limit, a rejection says how long to wait, the
// bucket expires in Redis once it would be full again, removal works, and an
// unreachable Redis is an error rather than a silent "allowed" or "denied".
// It prints each check and exits 1 if one fails.
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/grid/redis"
)

const prefix = "bucketgrid-example:"

func main() {
	addr := cmp.Or(os.Getenv("REDIS_ADDR"), "127.0.0.1:6379")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := run(ctx, addr, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "newbackend:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, addr string, out io.Writer) error {
	// ContextTimeoutEnabled makes each request's deadline bound every Redis
	// call, which is what cas.Executor expects of a store.
	client := goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer client.Close()
	store := redis.New(client, redis.WithPrefix(prefix))
	lctx, lcancel := context.WithTimeout(ctx, 3*time.Second)
	defer lcancel()
	if err := store.Load(lctx); err != nil {
		return fmt.Errorf("no usable Redis at %s (%w); start one with: "+
			`scripts/servers.sh start && eval "$(scripts/servers.sh env)"`, addr, err)
	}
	fmt.Fprintf(out, "Redis at %s, keys under %q\n", addr, prefix)

	// Two nodes: each its own executor (and, in real life, its own process),
	// one store. Buckets expire one second after they would be full again.
	expiry := bucketgrid.WithExpiration(bucketgrid.ExpireAfterRefill(time.Second))
	nodeA := bucketgrid.NewManager(cas.New(store), expiry)
	nodeB := bucketgrid.NewManager(cas.New(store), expiry)

	// 5 requests, refilled at 5 per 10 seconds, for one API client.
	key := fmt.Sprintf("client-%d", time.Now().UnixNano())
	plan := func(context.Context) (core.Config, error) {
		return core.NewConfig(core.Greedy(5, 5, 10*time.Second))
	}
	a, b := nodeA.Bucket(key, plan), nodeB.Bucket(key, plan)

	var failed []string
	check := func(ok bool, format string, args ...any) {
		mark := "ok  "
		if !ok {
			mark = "FAIL"
			failed = append(failed, fmt.Sprintf(format, args...))
		}
		fmt.Fprintf(out, "%s %s\n", mark, fmt.Sprintf(format, args...))
	}

	served := 0
	for i := range 5 {
		h := a
		if i%2 == 1 {
			h = b
		}
		ok, err := h.TryConsume(ctx, 1)
		if err != nil {
			return err
		}
		if ok {
			served++
		}
	}
	check(served == 5, "5 requests alternating between node A and node B: %d served", served)

	probe, err := b.TryConsumeAndReturnRemaining(ctx, 1)
	if err != nil {
		return err
	}
	wait := probe.WaitForRefill
	check(!probe.Consumed && wait > 0 && wait <= 2*time.Second,
		"the 6th request, on node B, is rejected: remaining %d, retry after %v", probe.Remaining, wait.Round(time.Millisecond))

	pttl, err := client.PTTL(ctx, prefix+key).Result()
	if err != nil {
		return err
	}
	check(pttl > 0 && pttl <= 11*time.Second,
		"in Redis the bucket expires in %v: after a full refill (10 s) plus the 1 s margin", pttl.Round(time.Millisecond))

	if err := nodeA.RemoveBucket(ctx, key); err != nil {
		return err
	}
	n, err := client.Exists(ctx, prefix+key).Result()
	if err != nil {
		return err
	}
	left, err := b.AvailableTokens(ctx) // recreated full from the plan
	if err != nil {
		return err
	}
	check(n == 0 && left == 5, "after RemoveBucket the key is gone and the next use starts full: %d tokens", left)
	if err := nodeA.RemoveBucket(ctx, key); err != nil {
		return err
	}

	// An outage is an error wrapping cas.ErrStore: the application decides
	// to fail open or closed; it is never mistaken for contention.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	deadAddr := ln.Addr().String()
	ln.Close()
	dead := goredis.NewClient(&goredis.Options{Addr: deadAddr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer dead.Close()
	down := bucketgrid.NewManager(cas.New(redis.New(dead))).Bucket(key, plan)
	octx, ocancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer ocancel()
	_, err = down.TryConsume(octx, 1)
	check(errors.Is(err, cas.ErrStore), "with Redis unreachable, TryConsume returns a store error: %v", err)

	if len(failed) > 0 {
		return fmt.Errorf("%d checks failed", len(failed))
	}
	return nil
}
