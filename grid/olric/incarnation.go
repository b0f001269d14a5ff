package olric

import (
	"fmt"
	"reflect"
	"sync/atomic"
	"unsafe"

	"github.com/hashicorp/memberlist"
)

// gossipIncarnation returns a function reading this member's own gossip
// incarnation number: memberlist raises it only to refute a suspicion or
// a death another member declared of this one (and on a metadata update,
// which the member never makes). memberlist v0.5.3 keeps it unexported
// (Memberlist.incarnation, a uint32 it updates atomically); a layout that
// does not match is an error, never a guess, and the caller then treats
// every split's end as a hand-over of everything (see refresh).
func gossipIncarnation(ml *memberlist.Memberlist) (func() uint32, error) {
	if ml == nil {
		return nil, fmt.Errorf("bucketgrid/olric: no memberlist")
	}
	f := reflect.ValueOf(ml).Elem().FieldByName("incarnation")
	if !f.IsValid() || f.Kind() != reflect.Uint32 {
		return nil, fmt.Errorf("bucketgrid/olric: memberlist has no incarnation where v0.5.3 keeps it")
	}
	p := (*uint32)(unsafe.Pointer(f.UnsafeAddr()))
	return func() uint32 { return atomic.LoadUint32(p) }, nil
}
