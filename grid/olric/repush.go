package olric

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync/atomic"
	"time"
	"unsafe"

	olricdb "github.com/olric-data/olric"
)

// repushChannel is the Olric pub/sub channel on which a member whose
// Olric applies a routing table older than the coordinator's asks the
// coordinator to push its table again (see staleTable).
const repushChannel = "bucketgrid.repush"

// staleAsk is how long a member's Olric may route by a table other than
// the coordinator's before the member asks for a push, and how often it
// asks again while it still does: a push the coordinator made reaches
// every member within milliseconds, so a table older than this missed it.
const staleAsk = time.Second

// olricRouting is Olric v0.7.4's routing table service inside one member
// (Olric.rt), reached by reflection like its memberlist (heal.go): Olric
// offers no public way to see which table a member applies, nor to have
// the coordinator push its table again.
//
// Why it is needed: the coordinator computes the table at each membership
// change and pushes it once to every member; a member refuses a push from
// a coordinator other than the one its own gossip names (Olric's
// verifyRoutingTable). When the coordinator itself is killed, the member
// whose gossip declares it dead first becomes coordinator and pushes at
// once, and another member whose gossip still lists the killed member
// (suspected, not yet dead) refuses that push. Nothing pushes again until
// the next membership change or Olric's periodic push (a minute): that
// member's Olric meanwhile sends the partitions the coordinator handed it
// to the dead member, and every check of those keys fails.
type olricRouting struct {
	primary reflect.Value // *partitions.Partitions
	update  reflect.Value // (*routingtable.RoutingTable).UpdateEagerly
}

// newOlricRouting finds db's routing table service; a layout that is not
// Olric v0.7.4's is an error, never a guess.
func newOlricRouting(db *olricdb.Olric) (*olricRouting, error) {
	rt, err := exposedField(reflect.ValueOf(db), "rt")
	if err != nil {
		return nil, err
	}
	primary, err := exposedField(rt, "primary")
	if err != nil {
		return nil, err
	}
	or := &olricRouting{primary: primary, update: rt.MethodByName("UpdateEagerly")}
	byID := primary.MethodByName("PartitionByID")
	if !or.update.IsValid() || or.update.Type().NumIn() != 0 || !byID.IsValid() ||
		byID.Type().NumIn() != 1 || byID.Type().In(0).Kind() != reflect.Uint64 {
		return nil, errors.New("bucketgrid/olric: Olric's routing table is not v0.7.4's (UpdateEagerly, PartitionByID)")
	}
	owners := byID.Type().Out(0).Elem()
	m, ok := reflect.PointerTo(owners).MethodByName("Owners")
	if !ok || m.Type.NumOut() != 1 || m.Type.Out(0).Kind() != reflect.Slice {
		return nil, errors.New("bucketgrid/olric: Olric's partition has no Owners as in v0.7.4")
	}
	if f, ok := m.Type.Out(0).Elem().FieldByName("Name"); !ok || f.Type.Kind() != reflect.String {
		return nil, errors.New("bucketgrid/olric: Olric's member has no Name as in v0.7.4")
	}
	return or, nil
}

// exposedField returns the field name of the struct v points to, usable
// as an exported one (its methods callable).
func exposedField(v reflect.Value, name string) (reflect.Value, error) {
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return reflect.Value{}, fmt.Errorf("bucketgrid/olric: Olric has no %s where v0.7.4 keeps it", name)
	}
	f := v.Elem().FieldByName(name)
	if !f.IsValid() || f.Kind() != reflect.Pointer {
		return reflect.Value{}, fmt.Errorf("bucketgrid/olric: Olric has no field %s (not v0.7.4's layout)", name)
	}
	return reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem(), nil
}

// differs reports whether the table this member's Olric applies names
// another owner than owners (a routing read of the coordinator's table)
// for some partition whose owner owners knows.
func (or *olricRouting) differs(owners []string) bool {
	byID := or.primary.MethodByName("PartitionByID")
	for p, o := range owners {
		if o == "" {
			continue
		}
		part := byID.Call([]reflect.Value{reflect.ValueOf(uint64(p))})[0]
		list := part.MethodByName("Owners").Call(nil)[0]
		if list.Len() == 0 || list.Index(list.Len()-1).FieldByName("Name").String() != o {
			return true
		}
	}
	return false
}

// stale tracks, for the router, since when this member's Olric has
// applied a table other than the coordinator's.
type stale struct {
	or    *olricRouting // nil: Olric's layout is unknown, nothing is checked
	since int64         // m.mono of the first read that found it stale, 0 for none
	asked int64         // m.mono of the latest ask
	asks  atomic.Int64  // asks made (tests)
	// pushes counts the pushes this member made on an ask (tests);
	// pushing is set while one runs.
	pushes  atomic.Int64
	pushing atomic.Bool
}

// staleTable checks, after routing read nr (of the coordinator's table,
// returned at now), whether this member's Olric still routes by an older
// table, and asks the coordinator to push again once it has for staleAsk
// (and every staleAsk while it still does). Only the refresher calls it.
//
// A crash is a split in this member's view until the dead member is
// forgotten (membership.count keeps it known), and a crash of the
// coordinator is when a push is missed: so a split whose every missing
// member was proven dead (deaths) is checked too. A split with a member
// not proven dead is not: the coordinator's push would wait on a member it
// cannot reach while it holds its routing lock.
func (rtr *router) staleTable(nr *routes, now int64) {
	st := &rtr.stale
	crash := nr.split && rtr.m.members.deaths.allProvenSince(nr.absent, nr.splitSince)
	if st.or == nil || nr.split && !crash || !st.or.differs(nr.owners) {
		st.since = 0
		return
	}
	if st.since == 0 {
		st.since = now
	}
	if now-st.since < int64(staleAsk) || now-st.asked < int64(staleAsk) {
		return
	}
	st.asked = now
	st.asks.Add(1)
	m := rtr.m
	m.logf("Olric on this member routes by a table older than the coordinator's for %v: asking the coordinator to push it again",
		time.Duration(now-st.since).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(m.ctx, 200*time.Millisecond)
	defer cancel()
	ps, err := m.node.client.NewPubSub()
	if err != nil {
		return
	}
	ps.Publish(ctx, repushChannel, m.name)
}

// repush pushes Olric's routing table to every member again, when this
// member is the coordinator (Olric's UpdateEagerly does nothing on
// another), one push at a time, off the caller's goroutine: the push holds
// the coordinator's routing lock while it waits for each member's answer.
func (rtr *router) repush() {
	st := &rtr.stale
	m := rtr.m
	if st.or == nil || m.ctx.Err() != nil || !st.pushing.CompareAndSwap(false, true) {
		return
	}
	m.wg.Go(func() {
		defer st.pushing.Store(false)
		if m.ctx.Err() != nil {
			return
		}
		st.pushes.Add(1)
		st.or.update.Call(nil)
	})
}
