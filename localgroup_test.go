package bucketgrid

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/core"
)

// TestLocalGroupSharesConfigurations: buckets of equal configurations share
// one read-only copy, a replacement leaves it alone, beyond sharedConfigs
// plans buckets get private copies, and a single-bandwidth bucket's state
// lives inside its Local.
func TestLocalGroupSharesConfigurations(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(t0)
	g := NewLocalGroup(WithClock(clk))
	cfg, _ := core.NewConfig(core.Greedy(10, 10, time.Minute))
	var a, b, c Local
	for _, l := range []*Local{&a, &b} {
		if err := g.Init(l, cfg, clk.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if &a.b.Config.Bandwidths[0] != &b.b.Config.Bandwidths[0] {
		t.Fatal("equal configurations are not shared")
	}
	if &a.b.Bands[0] != &a.one[0] {
		t.Fatal("a single bandwidth's state is not inside the Local")
	}
	other, _ := core.NewConfig(core.Greedy(1000, 1000, time.Second))
	if err := a.ReplaceConfiguration(ctx, other, core.InheritAsIs); err != nil {
		t.Fatal(err)
	}
	if b.b.Config.Bandwidths[0].Capacity != 10 {
		t.Fatal("a replacement leaked into another bucket's configuration")
	}
	if err := g.Init(&c, cfg, clk.Now()); err != nil || c.b.Config.Bandwidths[0].Capacity != 10 || available(t, &c) != 10 {
		t.Fatalf("a replacement leaked into the shared configuration: %v", err)
	}
	plans := NewLocalGroup()
	for i := range 3 * sharedConfigs {
		var l Local
		cfg, _ := core.NewConfig(core.Greedy(int64(i+1), 1, time.Second))
		if err := plans.Init(&l, cfg, clock.Monotonic().Now()); err != nil || available(t, &l) != int64(i+1) {
			t.Fatalf("plan %s: %v", strconv.Itoa(i), err)
		}
	}
	if len(plans.cfgs) != sharedConfigs {
		t.Fatalf("%d shared configurations, want %d", len(plans.cfgs), sharedConfigs)
	}
	// an invalid configuration is refused, as NewLocal refuses it
	var bad Local
	if err := g.Init(&bad, core.Config{}, clk.Now()); err == nil {
		t.Fatal("an empty configuration accepted")
	}
}
