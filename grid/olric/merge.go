package olric

import (
	"context"
	"slices"

	"github.com/bucketgrid/bucketgrid/grid/olric/internal/frame"
	"github.com/bucketgrid/bucketgrid/grid/olric/internal/journal"
)

// shipJournal starts sending the journal to the buckets' owners, unless it
// is empty or already being sent. Called after a routing read in which no
// known member is missing.
func (m *Member) shipJournal() {
	if m.ctx.Err() != nil || !m.journal.StartShipping() {
		return
	}
	m.wg.Go(func() {
		defer m.journal.DoneShipping()
		// Every journaled bucket merges into its owner's state (this
		// member's own included: Olric moved the other side's copy in
		// meanwhile).
		m.journal.Ship(m.ctx, m.cfg.Clock.Now, func(key string, payload []byte) error {
			ctx, cancel := context.WithTimeout(m.ctx, m.cfg.RequestTimeout)
			defer cancel()
			_, err := m.do(ctx, key, nil, frame.KindMerge, payload)
			return err
		})
	})
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
	if !journal.Fewer(incoming, s.state, m.cfg.Clock.Now()) {
		return outcome{kind: frame.KindOK, removed: true}
	}
	incoming = slices.Clone(incoming) // the connection's read buffer; the cache keeps it
	if err := m.write(&o, key, incoming, int64(ttl)); err != nil {
		return outcome{kind: frame.KindError, err: err, retry: true}
	}
	return outcome{kind: frame.KindOK, removed: true}
}
