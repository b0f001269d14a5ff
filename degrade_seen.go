package bucketgrid

import (
	"hash/maphash"
	"sync"

	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/core/wire"
)

// seenTokens is what an executor's answer said of a key's tokens: at most
// Tokens were left at At, on the Manager's clock.
type seenTokens struct {
	Tokens int64
	At     int64
}

// seenShards splits the seen map so that concurrent answers for different
// keys rarely share a lock.
const seenShards = 64

// seenMap holds, per store key, what the executor last said of its
// tokens, bounded like the local buckets (Degrade.maxKeys): past the
// bound an arbitrary key of the same shard is forgotten (its share then
// starts full, as for a key never seen).
type seenMap struct {
	seed   maphash.Seed
	max    int // per shard
	shards [seenShards]struct {
		mu sync.Mutex
		m  map[string]seenTokens // guarded by mu
	}
}

func (sm *seenMap) init(maxKeys int) {
	sm.seed = maphash.MakeSeed()
	sm.max = max(maxKeys/seenShards, 1)
}

func (sm *seenMap) shard(key string) int { return int(maphash.String(sm.seed, key) % seenShards) }

// set records st for key; forget drops what was known of it.
func (sm *seenMap) set(key string, st seenTokens, forget bool) {
	sh := &sm.shards[sm.shard(key)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if forget {
		delete(sh.m, key)
		return
	}
	if sh.m == nil {
		sh.m = make(map[string]seenTokens)
	}
	if _, ok := sh.m[key]; !ok && len(sh.m) >= sm.max {
		for k := range sh.m {
			delete(sh.m, k)
			break
		}
	}
	sh.m[key] = st
}

// get returns what was last seen of key's tokens.
func (sm *seenMap) get(key string) (seenTokens, bool) {
	sh := &sm.shards[sm.shard(key)]
	sh.mu.Lock()
	st, ok := sh.m[key]
	sh.mu.Unlock()
	return st, ok
}

// saw records what the executor's answer resp to ops says of key's tokens
// after them: an upper bound on what the bucket held. The remaining
// tokens of TryConsumeAndReturnRemaining and Estimate, none after
// TryConsumeAsMuchAsPossible took less than asked, fewer than asked after
// a refused TryConsume, the least bandwidth of a verbose answer's
// diagnostics. An operation that may add tokens (AddTokens, Reset, a
// configuration replaced) after the last of those makes the key unknown
// again; one that only takes tokens leaves the bound true.
func (g *degrader) saw(key string, ops []wire.Op, resp *wire.Response) {
	var tokens int64
	known, change := false, false
	for i := range ops {
		op, r := &ops[i], &resp.Results[i]
		switch op.Kind {
		case wire.OpTryConsumeAndReturnRemaining, wire.OpEstimate:
			tokens, known, change = r.Tokens, true, true
		case wire.OpTryConsumeAsMuchAsPossible:
			if r.Tokens < op.Tokens {
				tokens, known, change = 0, true, true
			}
		case wire.OpTryConsume:
			if !r.OK {
				tokens, known, change = op.Tokens-1, true, true
			}
		case wire.OpAddTokens, wire.OpForceAddTokens, wire.OpReset, wire.OpReplaceConfiguration:
			known, change = false, true
		}
	}
	if d := resp.Diagnostics; d != nil && len(d.Available) > 0 {
		tokens, known, change = d.Available[0], true, true
		for _, a := range d.Available[1:] {
			tokens = min(tokens, a)
		}
	}
	if change {
		g.seen.set(key, seenTokens{Tokens: tokens, At: g.m.clock.Now()}, !known)
	}
}

// seedShare returns the local bucket, encoded, of a share of n instances
// (configuration cut, version v) that starts from what was seen of the real
// bucket: each bandwidth holds at most seen.Tokens/n (rounded down), and
// refills from seen.At at the share's rate (an aligned one at its next
// boundary). The n instances together start
// from no more than what each last saw.
func seedShare(cut *core.Config, v int64, seen seenTokens, n int) []byte {
	st := core.NewStateHolding(cut.Clone(), seen.At, core.SeenShareOf(seen.Tokens, n))
	st.ConfigVersion = v
	return wire.AppendState(nil, &st)
}
