package olric

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/vmihailenco/msgpack/v5"
)

// movedFragment is Olric v0.7.4's fragment pack (internal/dmap's
// fragmentPack), the payload of its internal.node.movefragment command.
type movedFragment struct {
	PartID  uint64
	Kind    int // partitions.PRIMARY is 1
	Name    string
	Payload []byte
}

// emptyTable is an empty table of Olric v0.7.4's key-value store as its
// export encodes one (internal/kvstore/table.Pack): the smallest fragment
// a member's balancer can move. OffsetIndex is an empty roaring64 bitmap:
// a count of zero containers, 8 bytes.
type emptyTable struct {
	Offset      uint64
	Allocated   uint64
	Inuse       uint64
	Garbage     uint64
	RecycledAt  int64
	State       uint8 // table.ReadWriteState
	HKeys       map[uint64]uint64
	OffsetIndex []byte
	Memory      []byte
}

// TestShutdownUnderFragmentMoves is another member's balancer moving
// fragments to a member while it shuts down: the sender moves one
// fragment after another to the leaver, each to a partition that the
// routing table the sender reads gives the leaver, as Olric's balancer
// does with its own table, until the leaver's Shutdown returned. Olric
// v0.7.4 counts each fragment it receives in the WaitGroup that its DMap
// service's Shutdown waits on (to publish the cluster event the member
// subscribes to); a fragment received once that Wait began is a data race
// (under the race detector) and, inside a narrow window, the panic "sync:
// WaitGroup is reused before previous Wait has returned". Shutdown must
// leave the cluster first and wait until nothing routes to the member any
// longer. The race pass is what judges; the test also checks that the
// sender's moves were accepted, so that it did test something.
func TestShutdownUnderFragmentMoves(t *testing.T) {
	ms := startCluster(t, 2, nil)
	waitStable(t, ms)
	sender, leaver := ms[0], ms[1]
	pack, err := msgpack.Marshal(emptyTable{
		Allocated: 1, State: 1, HKeys: map[uint64]uint64{}, OffsetIndex: make([]byte, 8),
	})
	if err != nil {
		t.Fatal(err)
	}
	rc := redis.NewClient(&redis.Options{Addr: leaver.Name(), Password: leaver.trust.creds.password, MaxRetries: -1})
	defer rc.Close()

	var accepted, refused atomic.Int64
	var lastRefusal atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		next := uint64(0)
		for {
			select {
			case <-stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			rt, err := sender.node.client.RoutingTable(ctx)
			cancel()
			if err != nil {
				continue
			}
			// The next partition the table gives the leaver, round robin.
			part, found := uint64(0), false
			for i := range sender.cfg.PartitionCount {
				p := (next + i) % sender.cfg.PartitionCount
				if o := rt[p].PrimaryOwners; len(o) > 0 && o[len(o)-1] == leaver.Name() {
					part, found = p, true
					break
				}
			}
			if !found {
				// Nothing routes to the leaver any more: a balancer
				// reading this table moves nothing to it.
				select {
				case <-stop:
					return
				case <-time.After(5 * time.Millisecond):
				}
				continue
			}
			next = part + 1
			fp, err := msgpack.Marshal(movedFragment{PartID: part, Kind: 1, Name: leaver.cfg.DMap, Payload: pack})
			if err != nil {
				t.Error(err)
				return
			}
			ctx, cancel = context.WithTimeout(context.Background(), 2*time.Second)
			err = rc.Do(ctx, "internal.node.movefragment", fp).Err()
			cancel()
			if err == nil {
				accepted.Add(1)
			} else {
				refused.Add(1)
				lastRefusal.Store(err.Error())
			}
		}
	})
	defer func() {
		close(stop)
		wg.Wait()
	}()

	deadline := time.Now().Add(30 * time.Second)
	for accepted.Load() < 20 {
		if time.Now().After(deadline) {
			t.Fatalf("the leaver accepted %d of the sender's moves in 30 s (%d refused, last: %v): the sender does not move fragments as a balancer does",
				accepted.Load(), refused.Load(), lastRefusal.Load())
		}
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	before := accepted.Load()
	if err := leaver.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("moves accepted: %d before Shutdown, %d during; %d refused (last: %v)",
		before, accepted.Load()-before, refused.Load(), lastRefusal.Load())
}
