package bucketgrid_test

import (
	"reflect"
	"testing"

	"github.com/bucketgrid/bucketgrid"
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
		{"NewLocal, NewLocalGroup", reflect.TypeFor[bucketgrid.LocalOption]()},
		{"NewManager", reflect.TypeFor[bucketgrid.ManagerOption]()},
		{"Manager.Bucket", reflect.TypeFor[bucketgrid.HandleOption]()},
	}
	tests := []struct {
		name  string
		opt   any
		takes []string
	}{
		{"WithClock", bucketgrid.WithClock(clock.Wall()), []string{"NewLocal, NewLocalGroup", "NewManager"}},
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
