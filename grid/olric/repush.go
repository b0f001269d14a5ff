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
	olricconfig "github.com/olric-data/olric/config"
	"github.com/redis/go-redis/v9"
	"github.com/vmihailenco/msgpack/v5"
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
	rt        reflect.Value // *routingtable.RoutingTable
	primary   reflect.Value // *partitions.Partitions
	byID      reflect.Value // primary's PartitionByID, found once
	owners    reflect.Value // (*partitions.Partition).Owners, as a function of the partition
	table     reflect.Value // RoutingTable.table: the coordinator's last computed table
	discovery reflect.Value // *discovery.Discovery
	// client is Olric's client configuration, for the push to one
	// member (pushTo); nil where nothing pushes (tests).
	client *olricconfig.Client
}

// updateRoutingCommand is Olric v0.7.4's internal command that pushes a
// routing table to a member (protocol.Internal.UpdateRouting): arguments
// the msgpack of the table and the coordinator's member ID. A member that
// knows no such command answers with an error, never applies a guess.
const updateRoutingCommand = "internal.node.updaterouting"

// newOlricRouting finds db's routing table service; a layout that is not
// Olric v0.7.4's is an error, never a guess. client is Olric's client
// configuration (Config.Client once Olric sanitized it), nil for a
// routing that is only read.
func newOlricRouting(db *olricdb.Olric, client *olricconfig.Client) (*olricRouting, error) {
	rt, err := exposedField(reflect.ValueOf(db), "rt")
	if err != nil {
		return nil, err
	}
	primary, err := exposedField(rt, "primary")
	if err != nil {
		return nil, err
	}
	table, err := exposedField(rt, "table")
	if err != nil {
		return nil, err
	}
	or := &olricRouting{rt: rt, primary: primary, table: table, client: client}
	byID := primary.MethodByName("PartitionByID")
	if !byID.IsValid() || byID.Type().NumIn() != 1 || byID.Type().In(0).Kind() != reflect.Uint64 {
		return nil, errors.New("bucketgrid/olric: Olric's partitions are not v0.7.4's (PartitionByID)")
	}
	owners := byID.Type().Out(0).Elem()
	m, ok := reflect.PointerTo(owners).MethodByName("Owners")
	if !ok || m.Type.NumOut() != 1 || m.Type.Out(0).Kind() != reflect.Slice {
		return nil, errors.New("bucketgrid/olric: Olric's partition has no Owners as in v0.7.4")
	}
	or.byID, or.owners = byID, m.Func
	member := m.Type.Out(0).Elem()
	if !isOlricMember(member) {
		return nil, errors.New("bucketgrid/olric: Olric's member has no Name and ID as in v0.7.4")
	}
	// The table: map[uint64]*route, route{Owners, Backups []discovery.Member}.
	tt := table.Type()
	if tt.Key().Kind() != reflect.Uint64 || tt.Elem().Kind() != reflect.Pointer || tt.Elem().Elem().Kind() != reflect.Struct ||
		tt.Elem().Elem().NumField() != 2 {
		return nil, errors.New("bucketgrid/olric: Olric's routing table is not v0.7.4's map of routes")
	}
	for _, name := range []string{"Owners", "Backups"} {
		if f, ok := tt.Elem().Elem().FieldByName(name); !ok || f.Type != reflect.SliceOf(member) {
			return nil, fmt.Errorf("bucketgrid/olric: Olric's route has no %s as in v0.7.4", name)
		}
	}
	disc := rt.MethodByName("Discovery")
	this := rt.MethodByName("This")
	if !disc.IsValid() || disc.Type().NumIn() != 0 || disc.Type().NumOut() != 1 ||
		!this.IsValid() || this.Type().NumIn() != 0 || this.Type().NumOut() != 1 || this.Type().Out(0) != member {
		return nil, errors.New("bucketgrid/olric: Olric's routing table has no Discovery and This as in v0.7.4")
	}
	or.discovery = disc.Call(nil)[0]
	isCoord := or.discovery.MethodByName("IsCoordinator")
	find := or.discovery.MethodByName("FindMemberByName")
	if !isCoord.IsValid() || isCoord.Type().NumIn() != 0 || isCoord.Type().NumOut() != 1 || isCoord.Type().Out(0).Kind() != reflect.Bool ||
		!find.IsValid() || find.Type().NumIn() != 1 || find.Type().In(0).Kind() != reflect.String || find.Type().NumOut() != 2 ||
		find.Type().Out(0) != member || find.Type().Out(1) != reflect.TypeFor[error]() {
		return nil, errors.New("bucketgrid/olric: Olric's discovery has no IsCoordinator and FindMemberByName as in v0.7.4")
	}
	for _, name := range []string{"TryRLock", "RUnlock"} {
		if !rt.MethodByName(name).IsValid() {
			return nil, fmt.Errorf("bucketgrid/olric: Olric's routing table has no %s (its routing lock) as in v0.7.4", name)
		}
	}
	return or, nil
}

// isOlricMember reports whether t is laid out as Olric v0.7.4's
// discovery.Member as far as this file reads it.
func isOlricMember(t reflect.Type) bool {
	if t.Kind() != reflect.Struct {
		return false
	}
	name, ok := t.FieldByName("Name")
	id, ok2 := t.FieldByName("ID")
	return ok && ok2 && name.Type.Kind() == reflect.String && id.Type.Kind() == reflect.Uint64
}

// exposedField returns the field name (a pointer or a map) of the struct
// v points to, usable as an exported one (its methods callable, its value
// readable).
func exposedField(v reflect.Value, name string) (reflect.Value, error) {
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return reflect.Value{}, fmt.Errorf("bucketgrid/olric: Olric has no %s where v0.7.4 keeps it", name)
	}
	f := v.Elem().FieldByName(name)
	if !f.IsValid() || f.Kind() != reflect.Pointer && f.Kind() != reflect.Map {
		return reflect.Value{}, fmt.Errorf("bucketgrid/olric: Olric has no field %s (not v0.7.4's layout)", name)
	}
	return reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem(), nil
}

// differs reports whether the table this member's Olric applies names
// another owner than owners (a routing read of the coordinator's table)
// for some partition whose owner owners knows.
func (or *olricRouting) differs(owners []string) bool {
	for p, o := range owners {
		if o == "" {
			continue
		}
		part := or.byID.Call([]reflect.Value{reflect.ValueOf(uint64(p))})[0]
		list := or.owners.Call([]reflect.Value{part})[0]
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
// not proven dead is not: no test covers an ask during such a split (the
// answer once pushed to every member, and waited there on a member the
// coordinator could not reach).
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
	m.node.announce(m.ctx, repushChannel)
}

// repushTimeout bounds the push to the asking member: the next ask comes
// staleAsk later anyway.
const repushTimeout = staleAsk

// errNotPusher: this member does not answer the ask (it is not Olric's
// coordinator in its own view, or it asked itself).
var errNotPusher = errors.New("bucketgrid/olric: this member does not push the routing table to the asker")

// pushTo pushes the table this member's Olric computed last, as Olric's
// coordinator, to the member called asker alone, bounded by ctx. It holds
// the routing lock only to encode the table, and only when it is free:
// Olric holds that lock while it computes a table and pushes it to every
// member, and waits meanwhile on any member that does not answer; such a
// push carries the newest table to the asker too, or the asker asks again.
// The asker's Olric checks the push as any other (verifyRoutingTable:
// from the coordinator its gossip names, a whole table) and answers with
// what it still holds of partitions it no longer owns; that answer is not
// read (Olric's own push would add the asker to those partitions' owners
// in the coordinator's table, until the asker's balancer moved them).
func (or *olricRouting) pushTo(ctx context.Context, asker string) error {
	this := or.rt.MethodByName("This").Call(nil)[0]
	if !or.discovery.MethodByName("IsCoordinator").Call(nil)[0].Bool() || asker == this.FieldByName("Name").String() {
		return errNotPusher
	}
	found := or.discovery.MethodByName("FindMemberByName").Call([]reflect.Value{reflect.ValueOf(asker)})
	if !found[1].IsNil() {
		return fmt.Errorf("bucketgrid/olric: %q asked for a routing push: not a member in this member's gossip: %w", asker, found[1].Interface().(error))
	}
	if !or.rt.MethodByName("TryRLock").Call(nil)[0].Bool() {
		return errors.New("bucketgrid/olric: no routing push on an ask while Olric computes or pushes a table: the asker asks again")
	}
	n := or.table.Len()
	var data []byte
	var err error
	if n > 0 {
		data, err = msgpack.Marshal(or.table.Interface())
	}
	or.rt.MethodByName("RUnlock").Call(nil)
	if n == 0 {
		return errors.New("bucketgrid/olric: no routing push on an ask: Olric has computed no table yet")
	}
	if err != nil {
		return fmt.Errorf("bucketgrid/olric: encoding Olric's routing table: %w", err)
	}
	return pushTable(ctx, or.client, asker, data, this.FieldByName("ID").Uint())
}

// pushTable sends Olric's update-routing command with table (encoded) from
// the coordinator whose member ID is coordinator to the member at addr,
// on a connection of its own dialled with Olric's client configuration
// client, and returns once addr answered or ctx ended: unlike Olric's own
// connections, which read under Olric's ReadTimeout whatever the context.
func pushTable(ctx context.Context, client *olricconfig.Client, addr string, table []byte, coordinator uint64) error {
	opt := client.RedisOptions()
	opt.Protocol = 2 // Olric's own connections to members speak RESP2
	opt.Addr = addr
	opt.ContextTimeoutEnabled = true
	opt.MaxRetries = -1 // a push again is the next ask
	rc := redis.NewClient(opt)
	defer rc.Close()
	cmd := redis.NewStringCmd(ctx, updateRoutingCommand, table, coordinator)
	if err := rc.Process(ctx, cmd); err != nil {
		return fmt.Errorf("bucketgrid/olric: pushing the routing table to %s: %w", addr, err)
	}
	return nil
}

// repush answers asker's ask: when this member is Olric's coordinator it
// pushes its table to asker alone (pushTo), one push at a time, off the
// caller's goroutine, within repushTimeout.
func (rtr *router) repush(asker string) {
	st := &rtr.stale
	m := rtr.m
	if st.or == nil || st.or.client == nil || m.ctx.Err() != nil || !st.pushing.CompareAndSwap(false, true) {
		return
	}
	m.wg.Go(func() {
		defer st.pushing.Store(false)
		ctx, cancel := context.WithTimeout(m.ctx, repushTimeout)
		defer cancel()
		err := st.or.pushTo(ctx, asker)
		switch {
		case err == nil:
			st.pushes.Add(1)
		case !errors.Is(err, errNotPusher):
			m.logf("%v", err)
		}
	})
}
