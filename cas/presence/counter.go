package presence

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/clock"
)

// Counter keeps one instance's presence record in a store and counts the
// records of the instances sharing it (see the package documentation). Its
// methods are safe for concurrent use.
type Counter struct {
	store  cas.Store
	batch  cas.Batcher // nil: the slots are read one Get at a time
	cfg    Config
	clock  clock.Clock
	id     id
	record []byte
	keys   []string // the slots' keys

	live atomic.Int64 // what LiveInstances reports

	refreshed, failed atomic.Int64

	mu      sync.Mutex // one refresh at a time; guards what follows
	slot    int        // the slot holding this instance's record; -1: none
	counted int        // the last count a refresh made, 0 before the first
	holdTo  int64      // until then (clock time) a lower count is not believed
}

// New returns a Counter of the instances sharing store under cfg.Prefix.
// It reports cfg.Floor (at least 1) until Refresh or Run first succeeds. It
// writes nothing: start Run, or call Refresh, to take part.
func New(store cas.Store, cfg Config) (*Counter, error) {
	if store == nil {
		return nil, errNoStore
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	c := &Counter{store: store, cfg: cfg, clock: cfg.Clock, slot: -1}
	c.batch, _ = store.(cas.Batcher)
	if _, err := rand.Read(c.id[:]); err != nil {
		return nil, fmt.Errorf("presence: an instance id: %w", err)
	}
	c.record = c.id.encode()
	c.keys = make([]string, cfg.Slots)
	for i := range c.keys {
		c.keys[i] = cfg.Prefix + strconv.Itoa(i)
	}
	if kc, ok := store.(cas.KeyChecker); ok {
		if err := kc.CheckKey(c.keys[len(c.keys)-1]); err != nil {
			return nil, fmt.Errorf("presence: the store cannot hold the records' keys (Prefix %q): %w", cfg.Prefix, err)
		}
	}
	c.live.Store(int64(max(cfg.Floor, 1)))
	return c, nil
}

// LiveInstances returns the number of instances counted live, at least
// Config.Floor and at least 1: the last count a refresh made, however long
// ago (see the package documentation). It is what Degrade.Instances calls
// (the LiveInstances of bucketgrid.Executor's optional methods): an atomic
// read, no I/O.
func (c *Counter) LiveInstances() int { return int(c.live.Load()) }

// Stats counts a Counter's refreshes.
type Stats struct {
	// Refreshed and Failed count the refreshes that succeeded and failed.
	Refreshed, Failed int64
}

// Stats returns the counts so far.
func (c *Counter) Stats() Stats {
	return Stats{Refreshed: c.refreshed.Load(), Failed: c.failed.Load()}
}

// Run refreshes at once and then every Config.Refresh until ctx ends, then
// withdraws the record and returns Withdraw's error. A refresh that fails
// is counted (Stats.Failed) and tried again at the next tick; meanwhile
// LiveInstances keeps the last count.
func (c *Counter) Run(ctx context.Context) error {
	t := time.NewTicker(c.cfg.Refresh)
	defer t.Stop()
	for {
		_ = c.Refresh(ctx)
		select {
		case <-ctx.Done():
			return c.Withdraw(context.WithoutCancel(ctx))
		case <-t.C:
		}
	}
}

// slotRead is what a refresh found in one slot.
type slotRead struct {
	found, valid bool
	id           id
	ver          cas.Version
}

// Refresh reads every slot, renews this instance's record (or claims a
// free slot for it) with a TTL of Config.TTL, and updates the count, in
// at most Config.Timeout. On an error the count stays as it was.
func (c *Counter) Refresh(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.refresh(ctx); err != nil {
		c.failed.Add(1)
		c.holdTo = c.clock.Now() + int64(c.cfg.TTL)
		return fmt.Errorf("presence: refresh: %w", err)
	}
	c.refreshed.Add(1)
	return nil
}

// refresh does Refresh's work. Called with c.mu held.
func (c *Counter) refresh(ctx context.Context) error {
	slots, err := c.read(ctx)
	if err != nil {
		return err
	}
	ids := make(map[id]struct{}, len(slots))
	mine := -1
	for i, s := range slots {
		if !s.valid {
			continue
		}
		ids[s.id] = struct{}{}
		if s.id == c.id && mine < 0 {
			mine = i
		}
	}
	if c.slot >= 0 && mine < 0 {
		// the record went before its TTL: the store lost data, or this
		// instance was away past it; the others' records may be gone too
		c.holdTo = c.clock.Now() + int64(c.cfg.TTL)
	}
	if mine >= 0 {
		ok, err := c.store.Replace(ctx, c.keys[mine], c.record, slots[mine].ver, c.cfg.TTL)
		if err != nil {
			return err
		}
		if !ok {
			mine = -1 // it expired or was taken since the read
		}
	}
	for i := 0; mine < 0 && i < len(slots); i++ {
		if slots[i].found {
			continue
		}
		ok, err := c.store.Insert(ctx, c.keys[i], c.record, c.cfg.TTL)
		if err != nil {
			return err
		}
		if ok {
			mine = i
		}
	}
	c.slot = mine
	ids[c.id] = struct{}{}
	n := len(ids)
	if c.clock.Now() < c.holdTo {
		n = max(n, c.counted)
	}
	c.counted = n
	c.live.Store(int64(max(n, c.cfg.Floor, 1)))
	return nil
}

// read returns what every slot holds.
func (c *Counter) read(ctx context.Context) ([]slotRead, error) {
	slots := make([]slotRead, len(c.keys))
	set := func(i int, data []byte, ver cas.Version, found bool) {
		slots[i].found, slots[i].ver = found, ver
		if found {
			slots[i].id, slots[i].valid = decode(data)
		}
	}
	if c.batch == nil {
		for i, k := range c.keys {
			data, ver, found, err := c.store.Get(ctx, k)
			if err != nil {
				return nil, err
			}
			set(i, data, ver, found)
		}
		return slots, nil
	}
	ops := make([]cas.Op, len(c.keys))
	ptrs := make([]*cas.Op, len(c.keys))
	for i, k := range c.keys {
		ops[i] = cas.Op{Kind: cas.OpGet, Key: k}
		ptrs[i] = &ops[i]
	}
	if err := c.batch.Batch(ctx, ptrs); err != nil {
		return nil, err
	}
	for i := range ops {
		r := &ops[i].Result
		if r.Err != nil {
			return nil, r.Err
		}
		set(i, r.Data, r.Ver, r.Found)
	}
	return slots, nil
}

// Withdraw takes this instance's record out of the count at once, in at
// most Config.Timeout: the others' next refresh no longer counts it. It
// leaves its slot holding no record until the slot expires, a millisecond
// later (or at the store's expiry resolution), rather than deleting a key
// another instance may have claimed since. A Counter that withdrew takes
// part again at its next refresh.
func (c *Counter) Withdraw(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.slot < 0 {
		return nil
	}
	key := c.keys[c.slot]
	c.slot = -1
	data, ver, found, err := c.store.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("presence: withdraw: %w", err)
	}
	if i, ok := decode(data); !found || !ok || i != c.id {
		return nil // gone already
	}
	if _, err := c.store.Replace(ctx, key, withdrawn, ver, time.Millisecond); err != nil {
		return fmt.Errorf("presence: withdraw: %w", err)
	}
	return nil
}

// errNoStore is returned by New for a nil store.
var errNoStore = errors.New("presence: no store")
