package tck_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/cas/memstore"
	"github.com/bucketgrid/bucketgrid/tck"
)

// flakyStore breaks every fifth Replace of a healthy store in one of two
// ways: misreport, which answers a lost race without writing (the bug the
// outage check exists for), or late, which fails with an error and applies
// the write after the writer's next read, as a hung server that thaws does.
type flakyStore struct {
	cas.Store
	mode string

	mu      sync.Mutex
	calls   int
	pending func()
}

func (s *flakyStore) Get(ctx context.Context, key string) ([]byte, cas.Version, bool, error) {
	data, ver, found, err := s.Store.Get(ctx, key)
	s.mu.Lock()
	late := s.pending
	s.pending = nil
	s.mu.Unlock()
	if late != nil {
		late() // lands between this read and the writer's next Replace
	}
	return data, ver, found, err
}

func (s *flakyStore) Replace(ctx context.Context, key string, data []byte, ver cas.Version, ttl time.Duration) (bool, error) {
	s.mu.Lock()
	s.calls++
	broken := s.calls%5 == 0
	if broken && s.mode == "late" {
		s.pending = func() { _, _ = s.Store.Replace(context.Background(), key, data, ver, ttl) }
	}
	s.mu.Unlock()
	switch {
	case broken && s.mode == "misreport":
		return false, nil
	case broken:
		return false, errors.New("flaky: no answer in time")
	}
	return s.Store.Replace(ctx, key, data, ver, ttl)
}

// TestOutageTally: a lost race right after a failed write is a late write,
// not a misreport; a lost race nothing explains is counted as lost.
func TestOutageTally(t *testing.T) {
	for _, tc := range []struct {
		mode             string
		wantLost, wantLa bool
	}{{"misreport", true, false}, {"late", false, true}} {
		t.Run(tc.mode, func(t *testing.T) {
			o := tck.StartOutageLoad(&flakyStore{Store: memstore.New(), mode: tc.mode}, "k", time.Second)
			o.WaitFor(t, func(r tck.OutageResult) bool { return r.OK >= 40 }, "40 increments")
			r := o.Stop()
			if (r.Lost > 0) != tc.wantLost || (r.LateWrites > 0) != tc.wantLa {
				t.Fatalf("%+v: want lost %v, late writes %v", r, tc.wantLost, tc.wantLa)
			}
		})
	}
}
