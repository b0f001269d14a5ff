package redis_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"flag"
	"strconv"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/bucketgrid/bucketgrid/cas"
	redis "github.com/bucketgrid/bucketgrid/grid/redis"
	"github.com/bucketgrid/bucketgrid/internal/harness/loadbench"
)

// luaBucket is the peer: the usual Redis token bucket in Lua — HMGET, refill,
// HMSET in one script, called with EVALSHA, one round trip per check.
const luaBucket = `
local key = KEYS[1]
local capacity = tonumber(ARGV[1])
local refill_rate = tonumber(ARGV[2])
local refill_interval = tonumber(ARGV[3])
local now = tonumber(ARGV[4])

-- Get current state or initialize
local bucket = redis.call('HMGET', key, 'tokens', 'last_refill')
local tokens = tonumber(bucket[1])
local last_refill = tonumber(bucket[2])

-- Initialize if this is the first request
if tokens == nil then
    tokens = capacity
    last_refill = now
end

-- Calculate token refill
local time_passed = now - last_refill
local refills = math.floor(time_passed / refill_interval)

if refills > 0 then
    tokens = math.min(capacity, tokens + (refills * refill_rate))
    last_refill = last_refill + (refills * refill_interval)
end

-- Try to consume a token
local allowed = 0
if tokens >= 1 then
    tokens = tokens - 1
    allowed = 1
end

-- Update state
redis.call('HMSET', key, 'tokens', tokens, 'last_refill', last_refill)

-- Return result: allowed (1 or 0) and remaining tokens
return {allowed, tokens}
`

var luaSHA = func() string {
	h := sha1.Sum([]byte(luaBucket))
	return hex.EncodeToString(h[:])
}()

// benchCallers is the number of concurrent callers.
const benchCallers = 16

// BenchmarkVersusLua runs bucket checks side by side on one Redis: the
// Lua token bucket (one EVALSHA per check; through go-redis's pool,
// and pipelined as a Lettuce client would) against bucketgrid's
// cas executor over this store — with its defaults (memory and
// pipelining), with each of the two alone, and with both off (the executor
// before them: a GET and a script per check). 16 callers, 1 key and 10,000
// keys; each key gets one check before the timer starts, so the figures are
// of buckets that exist. Every check must be admitted, and afterwards each
// bucket must hold exactly its capacity less the checks it admitted.
// Reported: checks/s, p50 and p99 latency, CPU per check of this process
// (callers, client, executor) and of redis-server, their sum, and round
// trips (commands alone or pipelines) per check.
//
//	scripts/servers.sh start && . .servers/env
//	go test -run '^$' -bench 'VersusLua/^(lua|lua-pipelined|cas|cas-before)$/' -benchtime 40000x ./grid/redis -versus.rounds 5
func BenchmarkVersusLua(b *testing.B) {
	addr := redisAddr(b)
	sides := []struct {
		name string
		run  func(b *testing.B, c *goredis.Client, trips *tripCounter, keys int)
	}{
		{"lua", benchLua(false)},
		{"lua-pipelined", benchLua(true)},
		{"cas", benchCAS()},
		{"cas-flushes=2", benchCAS(cas.WithPipelining(cas.PipelineConfig{Flushes: 2}))},
		{"cas-memory-only", benchCAS(cas.WithoutPipelining())},
		{"cas-pipelining-only", benchCAS(cas.WithoutMemory())},
		{"cas-before", benchCAS(cas.WithoutMemory(), cas.WithoutPipelining())},
	}
	for round := 1; round <= *versusRounds; round++ {
		for _, keys := range []int{1, 10000} {
			for _, side := range sides {
				name := side.name + "/keys=" + strconv.Itoa(keys)
				if *versusRounds > 1 {
					name += "/round=" + strconv.Itoa(round)
				}
				b.Run(name, func(b *testing.B) {
					c := newClient(b, addr)
					var trips tripCounter
					c.AddHook(&trips)
					side.run(b, c, &trips, keys)
				})
			}
		}
	}
}

// versusRounds repeats BenchmarkVersusLua's sides in turn, so that on a
// machine whose load changes by the minute each side sees the same spells:
// compare medians over rounds, never one run of one side against a later
// run of another.
var versusRounds = flag.Int("versus.rounds", 1, "rounds of BenchmarkVersusLua, its sides in turn in each")

// serverCPU returns the CPU time redis-server has used so far.
func serverCPU(b *testing.B) func() time.Duration {
	pid := loadbench.PidFromEnv("REDIS_PID")
	if pid == 0 {
		pid = loadbench.PidListening("redis-server", redisAddr(b))
	}
	return loadbench.ServerCPU(b, pid)
}

// benchLua runs the Lua script, each check an EVALSHA of its own —
// through go-redis's pool, or, pipelined, in shared pipelines as the
// Lettuce client sends the commands of concurrent callers on one
// multiplexed connection.
func benchLua(pipelined bool) func(b *testing.B, c *goredis.Client, trips *tripCounter, keys int) {
	return func(b *testing.B, c *goredis.Client, trips *tripCounter, keys int) {
		prefix := runPrefix + "lua" + strconv.Itoa(keys) + ":"
		names := make([]string, keys)
		for k := range names {
			names[k] = prefix + strconv.Itoa(k)
		}
		ctx := context.Background()
		if err := c.ScriptLoad(ctx, luaBucket).Err(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { unlink(c, names) })
		day := strconv.Itoa(24 * 3600)
		eval := func(ctx context.Context, key, now string) ([]int64, error) {
			return c.EvalSha(ctx, luaSHA, []string{key}, loadbench.Capacity, 1, day, now).Int64Slice()
		}
		if pipelined {
			p := &autoPipe{c: c, args: []any{loadbench.Capacity, 1, day}}
			eval = p.eval
		}
		l := loadbench.Load{
			Callers: benchCallers,
			Keys:    keys,
			Check: func(ctx context.Context, k int) (bool, error) {
				now := strconv.FormatFloat(float64(time.Now().UnixNano())/1e9, 'f', 6, 64)
				r, err := eval(ctx, names[k], now)
				if err != nil {
					return false, err
				}
				return r[0] == 1, nil
			},
			ServerCPU: serverCPU(b),
			Trips:     trips.trips.Load,
		}
		loadbench.Warm(b, l)
		admitted := loadbench.Run(b, l)
		loadbench.Verify(b, admitted, benchCallers, func(k int) (int64, error) {
			v, err := c.HGet(ctx, names[k], "tokens").Result()
			if err != nil {
				return 0, err
			}
			f, err := strconv.ParseFloat(v, 64)
			return int64(f), err
		})
	}
}

// autoPipe sends the script calls of concurrent callers in shared
// pipelines, one in flight: a caller that finds none in flight sends
// everything queued, and keeps sending what queued meanwhile until nothing
// is left; the others wait for their answers. Nothing waits for more calls
// to arrive.
type autoPipe struct {
	c     *goredis.Client
	args  []any // the script's arguments before "now"
	mu    sync.Mutex
	queue []*luaCall
	busy  bool
}

type luaCall struct {
	key, now string
	res      []int64
	err      error
	done     chan struct{}
}

func (p *autoPipe) eval(ctx context.Context, key, now string) ([]int64, error) {
	call := &luaCall{key: key, now: now, done: make(chan struct{})}
	p.mu.Lock()
	p.queue = append(p.queue, call)
	if p.busy {
		p.mu.Unlock()
		<-call.done
		return call.res, call.err
	}
	p.busy = true
	p.mu.Unlock()
	for {
		p.mu.Lock()
		batch := p.queue
		p.queue = nil
		if len(batch) == 0 {
			p.busy = false
			p.mu.Unlock()
			break
		}
		p.mu.Unlock()
		cmds, _ := p.c.Pipelined(ctx, func(pipe goredis.Pipeliner) error {
			for _, b := range batch {
				pipe.EvalSha(ctx, luaSHA, []string{b.key}, append(p.args[:len(p.args):len(p.args)], b.now)...)
			}
			return nil
		})
		for i, b := range batch {
			b.res, b.err = cmds[i].(*goredis.Cmd).Int64Slice()
			close(b.done)
		}
	}
	return call.res, call.err
}

func benchCAS(opts ...cas.Option) func(b *testing.B, c *goredis.Client, trips *tripCounter, keys int) {
	return func(b *testing.B, c *goredis.Client, trips *tripCounter, keys int) {
		prefix := runPrefix + "cas" + strconv.Itoa(keys) + ":"
		store := redis.New(c, redis.WithPrefix(prefix))
		if err := store.Load(context.Background()); err != nil {
			b.Fatal(err)
		}
		loadbench.CAS(b, store, benchCallers, keys, serverCPU(b), opts...)
	}
}

// unlink deletes keys, in pipelines of a thousand.
func unlink(c *goredis.Client, keys []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := 0; i < len(keys); i += 1000 {
		_ = c.Unlink(ctx, keys[i:min(i+1000, len(keys))]...).Err()
	}
}
