package localmap

import (
	"reflect"
	"testing"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/clock"
)

// TestOptionsAreTheMapsOwn: bucketgrid's options are not localmap's, not
// even by conversion, so giving one to New is a compile error.
func TestOptionsAreTheMapsOwn(t *testing.T) {
	opt := reflect.TypeFor[Option]()
	for name, o := range map[string]any{
		"bucketgrid.WithClock":    bucketgrid.WithClock(clock.Wall()),
		"bucketgrid.WithListener": bucketgrid.WithListener(nil),
	} {
		if typ := reflect.TypeOf(o); typ.AssignableTo(opt) || typ.ConvertibleTo(opt) {
			t.Errorf("%s is a localmap.Option", name)
		}
	}
}
