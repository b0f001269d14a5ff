package mongo_test

import (
	"context"
	"testing"

	"github.com/bucketgrid/bucketgrid/cas/presence"
)

// BenchmarkPresenceRefresh measures one refresh of an instance counter
// (cas/presence) with the default 64 slots: one Get after another (the store offers no cas.Batcher),
// and a Replace of its own record.
//
//	go test -run '^$' -bench PresenceRefresh -benchtime 100x .
func BenchmarkPresenceRefresh(b *testing.B) {
	s := newStore(b, 0)
	c, err := presence.New(s, presence.Config{})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := c.Refresh(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}
