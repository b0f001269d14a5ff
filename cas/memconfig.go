package cas

import "time"

// MemoryConfig bounds an Executor's memory of buckets (see WithMemory). Zero
// fields take the defaults of DefaultMemoryConfig.
type MemoryConfig struct {
	// Entries bounds the number of keys remembered.
	Entries int
	// Bytes bounds the bytes remembered: each key's bytes and value bytes
	// plus EntryOverhead.
	Bytes int
	// TTL bounds how long a key is remembered after the read or write that
	// taught it, on the executor's clock; a bucket written with a shorter
	// TTL is remembered no longer than that TTL. Expired keys are dropped
	// by the first operation on their part of the memory at least a TTL
	// after it last dropped them (TestMemorySweepsExpired), so they do not
	// stay until the bounds need their room.
	TTL time.Duration
}

// EntryOverhead is what MemoryConfig.Bytes counts for each remembered key on
// top of its key and value bytes: the entry, its slot in an index and a
// share of the map, about what the Go runtime spends.
const EntryOverhead = 96

// DefaultMemoryConfig returns the defaults: 65,536 keys, 16 MiB, 10 s. A
// bucket state is 40 to 100 bytes, so the entry bound binds first for keys
// of ordinary length and the byte bound for long keys. Ten seconds keeps
// the memory of a key that other processes write as well from costing more
// than a lost race now and then; the memory never decides anything on its
// own, so its length trades round trips only.
func DefaultMemoryConfig() MemoryConfig {
	return MemoryConfig{Entries: 1 << 16, Bytes: 16 << 20, TTL: 10 * time.Second}
}

func (c MemoryConfig) withDefaults() MemoryConfig {
	d := DefaultMemoryConfig()
	if c.Entries <= 0 {
		c.Entries = d.Entries
	}
	if c.Bytes <= 0 {
		c.Bytes = d.Bytes
	}
	if c.TTL <= 0 {
		c.TTL = d.TTL
	}
	return c
}

// PipelineConfig shapes the batches an Executor sends to a Batcher (see
// WithPipelining). Zero fields take the defaults of
// DefaultPipelineConfig.
type PipelineConfig struct {
	// Flushes bounds the batches in flight at once. While that many are in
	// flight, operations queue; when one returns, the queue goes in the
	// next batch.
	Flushes int
	// Ops bounds the operations in one batch.
	Ops int
	// StallAfter is how long a batch may hold its place among the Flushes
	// in flight: one still in flight after it no longer holds back the
	// queue, so a store that hangs on some keys delays only the operations
	// sent with them (they share their batch's fate, bounded by their
	// callers' deadlines). It should exceed a healthy batch's round trip;
	// a batch that outlives it costs one more batch in flight, never a
	// wrong decision. Negative: a batch holds its place until it returns.
	StallAfter time.Duration
}

// DefaultPipelineConfig returns the defaults: 1 batch in flight, 256
// operations each. One batch in flight does not bound throughput — every
// caller that arrives while it travels goes in the next, so n busy callers
// make batches of about n — and it sends the fewest, largest batches: on
// Redis it spent the least CPU per check on both sides, at the best p99,
// of 1, 2 and 4 (grid/redis's BenchmarkVersusLua). More batches in flight
// shorten the wait of an operation that arrives while one travels, at more
// round trips.
func DefaultPipelineConfig() PipelineConfig {
	return PipelineConfig{Flushes: 1, Ops: 256, StallAfter: 25 * time.Millisecond}
}

func (c PipelineConfig) withDefaults() PipelineConfig {
	d := DefaultPipelineConfig()
	if c.Flushes <= 0 {
		c.Flushes = d.Flushes
	}
	if c.Ops <= 0 {
		c.Ops = d.Ops
	}
	if c.StallAfter == 0 {
		c.StallAfter = d.StallAfter
	}
	return c
}
