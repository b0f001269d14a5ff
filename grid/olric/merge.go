package olric

import (
	"context"
	"encoding/binary"
	"slices"
	"sync"

	"github.com/bucketgrid/bucketgrid/core/wire"
	"github.com/bucketgrid/bucketgrid/grid/olric/internal/frame"
)

// maxJournal bounds the buckets a member journals during a split; beyond
// it, the oldest are dropped (a dropped bucket merges as Olric does, by
// last write).
const maxJournal = 1 << 16

// journal holds the buckets a member wrote while its gossip missed some of
// the members it knew (a split, or a crash): the other side may have
// written the same buckets. Once every member is back, each journaled
// bucket is sent to its owner, which keeps whichever state has fewer
// tokens, so a split forgets neither side's consumption.
type journal struct {
	mu       sync.Mutex
	entries  map[string]journalEntry
	order    []string // keys in the order first journaled, for the bound
	shipping bool
}

// journalEntry is a bucket's newest state and when it expires (Unix
// nanoseconds of the owner's clock; 0 for never).
type journalEntry struct {
	state   []byte
	expires int64
}

func (j *journal) put(key string, state []byte, ttl, now int64) {
	e := journalEntry{state: state}
	if ttl > 0 {
		e.expires = now + ttl
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, ok := j.entries[key]; !ok {
		for len(j.entries) >= maxJournal && len(j.order) > 0 {
			delete(j.entries, j.order[0])
			j.order = j.order[1:]
		}
		j.order = append(j.order, key)
	}
	j.entries[key] = e
}

func (j *journal) drop(key string) {
	j.mu.Lock()
	delete(j.entries, key)
	j.mu.Unlock()
}

// len returns how many buckets wait to be merged.
func (j *journal) len() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.entries)
}

// shipJournal starts sending the journal to the buckets' owners, unless it
// is empty or already being sent. Called after a routing read in which no
// known member is missing.
func (m *Member) shipJournal() {
	j := &m.journal
	j.mu.Lock()
	if j.shipping || len(j.entries) == 0 || m.ctx.Err() != nil {
		j.mu.Unlock()
		return
	}
	j.shipping = true
	m.wg.Add(1)
	j.mu.Unlock()
	go func() {
		defer m.wg.Done()
		m.sendJournal()
		j.mu.Lock()
		j.shipping = false
		j.mu.Unlock()
	}()
}

// sendJournal merges every journaled bucket into its owner's state (this
// member's own included: Olric moved the other side's copy in meanwhile).
// A bucket that could not be merged stays for the next attempt.
func (m *Member) sendJournal() {
	j := &m.journal
	j.mu.Lock()
	keys := make([]string, 0, len(j.entries))
	for k := range j.entries {
		keys = append(keys, k)
	}
	j.mu.Unlock()
	var wg sync.WaitGroup
	work := make(chan string)
	for range 8 {
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
					if ttl = e.expires - m.cfg.Clock.Now(); ttl <= 0 {
						j.dropIf(key, e)
						continue // expired: a full bucket, nothing to merge
					}
				}
				payload := binary.AppendUvarint(nil, uint64(ttl))
				payload = append(payload, e.state...)
				ctx, cancel := context.WithTimeout(m.ctx, m.cfg.RequestTimeout)
				_, err := m.do(ctx, key, nil, frame.KindMerge, payload)
				cancel()
				if err == nil {
					j.dropIf(key, e)
				}
			}
		})
	}
	for _, k := range keys {
		if m.ctx.Err() != nil {
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
func (j *journal) dropIf(key string, e journalEntry) {
	j.mu.Lock()
	if cur, ok := j.entries[key]; ok && &cur.state[0] == &e.state[0] {
		delete(j.entries, key)
	}
	j.mu.Unlock()
}

// execMerge merges a bucket state from another side of a split (payload:
// uvarint TTL nanoseconds, state) into key's bucket as its owner, under the
// same rules as execOwner: the state with fewer available tokens now, as
// core computes them, is kept.
func (m *Member) execMerge(ctx context.Context, key string, h uint64, payload []byte, b bound) outcome {
	ttl, incoming, err := frame.Uvarint(payload)
	if err != nil || len(incoming) == 0 {
		return outcome{kind: frame.KindError, err: frame.ErrMalformed}
	}
	o, refused, ok := m.hold(ctx, h, b)
	if !ok {
		return refused
	}
	defer m.release(&o)
	s, failed, ok := m.read(&o, key)
	if !ok {
		return failed
	}
	if !fewerTokens(incoming, s.state, m.cfg.Clock.Now()) {
		return outcome{kind: frame.KindOK, removed: true}
	}
	incoming = slices.Clone(incoming) // the connection's read buffer; the cache keeps it
	if err := m.write(&o, key, incoming, int64(ttl)); err != nil {
		return outcome{kind: frame.KindError, err: err, retry: true}
	}
	return outcome{kind: frame.KindOK, removed: true}
}

// availableOp asks core for a bucket's available tokens.
var availableOp = []wire.Op{{Kind: wire.OpAvailableTokens}}

// fewerTokens reports whether bucket state a holds fewer available tokens
// at now than b (core's model decides; an absent b has more, an a core
// cannot read has not).
func fewerTokens(a, b []byte, now int64) bool {
	ta, ok := available(a, now)
	if !ok {
		return false
	}
	tb, ok := available(b, now)
	return !ok || ta < tb
}

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
