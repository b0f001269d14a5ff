// Package journal owns the split journal of a grid/olric member: the
// buckets it wrote while its gossip missed some of the members it knew (a
// split, or a crash), when the other side may have written the same
// buckets, the lineage such a bucket carries (which splits' consumption
// it holds, Lineage) and the rule an owner merges it by (Merge). Once
// every member is back, each journaled bucket is sent to its owner, which
// subtracts from its own state the consumption the journaled one holds
// and its own does not, so a heal forgets neither side's consumption and
// counts none twice. How a bucket travels to its owner belongs to
// grid/olric.
package journal

import (
	"context"
	"encoding/binary"
	"sync"

	"github.com/bucketgrid/bucketgrid/core/wire"
)

// Max bounds the buckets a journal holds; beyond it, the oldest are
// dropped (a dropped bucket merges as Olric does, by last write).
const Max = 1 << 16

// Journal holds journaled buckets by key. Its zero value is empty and ready;
// it is safe for concurrent use.
type Journal struct {
	mu       sync.Mutex
	entries  map[string]entry
	order    []string // keys in the order first journaled, for the bound
	shipping bool
}

// entry is a bucket's newest state (as stored, lineage included), the
// branch its last write advanced (see Advance) and when it expires (Unix
// nanoseconds of the owner's clock; 0 for never).
type entry struct {
	state   []byte
	branch  Branch
	expires int64
}

// Put journals key's newest state (as stored, lineage included), written
// by advancing branch b (from Advance), which lives ttl nanoseconds from
// now (0: forever). The journal keeps state; the caller does not change
// it after.
func (j *Journal) Put(key string, state []byte, b Branch, ttl, now int64) {
	e := entry{state: state, branch: b}
	if ttl > 0 {
		e.expires = now + ttl
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.entries == nil {
		j.entries = map[string]entry{}
	}
	if _, ok := j.entries[key]; !ok {
		for len(j.entries) >= Max && len(j.order) > 0 {
			delete(j.entries, j.order[0])
			j.order = j.order[1:]
		}
		j.order = append(j.order, key)
	}
	j.entries[key] = e
}

// Drop forgets key (its bucket was removed).
func (j *Journal) Drop(key string) {
	j.mu.Lock()
	delete(j.entries, key)
	j.mu.Unlock()
}

// Len returns how many buckets wait to be merged.
func (j *Journal) Len() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.entries)
}

// StartShipping reports whether the caller should ship the journal now: it
// holds buckets and nobody ships it already. A true answer must be followed
// by Ship and then DoneShipping.
func (j *Journal) StartShipping() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.shipping || len(j.entries) == 0 {
		return false
	}
	j.shipping = true
	return true
}

// DoneShipping ends what StartShipping began.
func (j *Journal) DoneShipping() {
	j.mu.Lock()
	j.shipping = false
	j.mu.Unlock()
}

// workers is how many buckets Ship merges at once.
const workers = 8

// Ship hands every journaled bucket to merge, a few at once, with its
// payload: uvarint TTL nanoseconds left at now(), then the state. A bucket
// merge accepted (nil) or that expired meanwhile (a full bucket, nothing to
// merge) leaves the journal, unless it was rewritten meanwhile; one that
// failed stays for the next attempt. Ship stops handing out buckets when
// ctx ends.
func (j *Journal) Ship(ctx context.Context, now func() int64, merge func(key string, payload []byte) error) {
	j.mu.Lock()
	keys := make([]string, 0, len(j.entries))
	for k := range j.entries {
		keys = append(keys, k)
	}
	j.mu.Unlock()
	var wg sync.WaitGroup
	work := make(chan string)
	for range workers {
		wg.Go(func() {
			for key := range work {
				j.mu.Lock()
				e, ok := j.entries[key]
				j.mu.Unlock()
				if !ok {
					continue
				}
				var ttl int64
				if e.expires != 0 {
					if ttl = e.expires - now(); ttl <= 0 {
						j.dropIf(key, e)
						continue
					}
				}
				payload := binary.AppendUvarint(nil, uint64(ttl))
				payload = append(payload, e.state...)
				if merge(key, payload) == nil {
					j.dropIf(key, e)
				}
			}
		})
	}
	for _, k := range keys {
		if ctx.Err() != nil {
			break
		}
		work <- k
	}
	close(work)
	wg.Wait()
	j.mu.Lock()
	order := j.order[:0]
	for _, k := range j.order {
		if _, ok := j.entries[k]; ok {
			order = append(order, k)
		}
	}
	j.order = order
	j.mu.Unlock()
}

// dropIf removes key's entry if it is still e (not rewritten meanwhile).
func (j *Journal) dropIf(key string, e entry) {
	j.mu.Lock()
	if cur, ok := j.entries[key]; ok && &cur.state[0] == &e.state[0] {
		delete(j.entries, key)
	}
	j.mu.Unlock()
}

// availableOp asks core for a bucket's available tokens.
var availableOp = []wire.Op{{Kind: wire.OpAvailableTokens}}

// available returns the tokens core finds in a bucket state at now.
func available(state []byte, now int64) (int64, bool) {
	if len(state) == 0 {
		return 0, false
	}
	_, _, resp := wire.Process(state, wire.Request{Mode: wire.ModeBare, Ops: availableOp}, now)
	if resp.Status != wire.StatusOK || len(resp.Results) == 0 {
		return 0, false
	}
	return resp.Results[0].Tokens, true
}
