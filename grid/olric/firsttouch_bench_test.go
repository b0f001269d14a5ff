package olric

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/core"
)

// BenchmarkFirstTouch measures one member's check on a hot key against its
// check on a key it never saw, the first check of each of many
// descriptors: a cache miss and the Put of a new entry (and, on a member
// that heard of another, Olric's Gets of the absent entry and of its
// partition's lost mark: see ownerExec.whole).
func BenchmarkFirstTouch(b *testing.B) {
	ms := startCluster(b, 1, func(c *Config) {
		d := DefaultLocalConfig()
		c.RoutingRefresh, c.RoutingLease, c.HandoverGrace = d.RoutingRefresh, d.RoutingLease, d.HandoverGrace
	})
	cfg, err := core.NewConfig(core.Intervally(1<<40, 1<<40, 24*time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	req := consumeReq(&cfg, 1)
	ctx := context.Background()
	for _, shape := range []string{"hot", "new"} {
		b.Run(shape, func(b *testing.B) {
			prefix := shape + strconv.FormatInt(time.Now().UnixNano(), 36) + "-"
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				key := prefix
				if shape == "new" {
					key += strconv.Itoa(i)
				}
				if _, err := ms[0].Execute(ctx, key, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
