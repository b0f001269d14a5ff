package bucketgrid_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/cas/memstore"
	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/core/wire"
)

// TestOptionsTakenOnlyWhereTheyApply: each option is of a type that only the
// constructors taking it accept, so that giving it to another one is a
// compile error, and not even a type assertion turns it into an option of
// another constructor.
func TestOptionsTakenOnlyWhereTheyApply(t *testing.T) {
	kinds := []struct {
		name string
		typ  reflect.Type
	}{
		{"NewLocal, NewLocalGroup", reflect.TypeFor[bucketgrid.Option]()},
		{"NewManager", reflect.TypeFor[bucketgrid.ManagerOption]()},
		{"Manager.Bucket", reflect.TypeFor[bucketgrid.HandleOption]()},
	}
	tests := []struct {
		name  string
		opt   any
		takes []string
	}{
		{"WithClock", bucketgrid.WithClock(clock.Wall()), []string{"NewLocal, NewLocalGroup", "NewManager", "Manager.Bucket"}},
		{"WithListener", bucketgrid.WithListener(nil), []string{"NewLocal, NewLocalGroup", "NewManager", "Manager.Bucket"}},
		{"WithRecoveryFail", bucketgrid.WithRecoveryFail(), []string{"NewManager"}},
		{"WithExpiration", bucketgrid.WithExpiration(wire.Expiry{}), []string{"NewManager"}},
		{"WithFitKeys", bucketgrid.WithFitKeys(core.DigestKeyLen), []string{"NewManager"}},
		{"WithLogger", bucketgrid.WithLogger(nil), []string{"NewManager"}},
		{"WithEagerConfig", bucketgrid.WithEagerConfig(), []string{"NewManager"}},
		{"WithDegrade", bucketgrid.WithDegrade(bucketgrid.Degrade{}), []string{"NewManager"}},
		{"WithConfigVersion", bucketgrid.WithConfigVersion(1, core.InheritAsIs), []string{"Manager.Bucket"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, k := range kinds {
				if reflect.TypeOf(tt.opt).Implements(k.typ) {
					got = append(got, k.name)
				}
			}
			if !reflect.DeepEqual(got, tt.takes) {
				t.Fatalf("%s is an option of %v, want %v", tt.name, got, tt.takes)
			}
		})
	}
}

// TestHandleClock: WithClock given to Manager.Bucket is the clock that
// handle's blocking calls wait on, in place of the Manager's.
func TestHandleClock(t *testing.T) {
	mclk, hclk := clock.NewFake(time.Unix(1_800_000_000, 0)), clock.NewFake(time.Unix(1_800_000_000, 0))
	m := bucketgrid.NewManager(cas.New(memstore.New(memstore.WithClock(mclk)), cas.WithClock(mclk)), bucketgrid.WithClock(mclk))
	cfg, _ := core.NewConfig(core.Greedy(10, 10, time.Second).WithInitialTokens(0))
	h := m.Bucket("k", func(context.Context) (core.Config, error) { return cfg, nil }, bucketgrid.WithClock(hclk))
	m0, h0 := mclk.Now(), hclk.Now()
	if err := h.Consume(context.Background(), 5); err != nil {
		t.Fatal(err)
	}
	if mclk.Now() != m0 || time.Duration(hclk.Now()-h0) != 500*time.Millisecond {
		t.Fatalf("Manager's clock +%v, handle's +%v; want the handle's alone to wait the 500ms",
			time.Duration(mclk.Now()-m0), time.Duration(hclk.Now()-h0))
	}
}
