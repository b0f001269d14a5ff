package olric

import (
	"context"
	"errors"
	"fmt"
	"testing"

	olricdb "github.com/olric-data/olric"
)

// tornTables returns Olric's table before (member "d" owning every third
// of n partitions, backed up on the next member) and after d was killed
// (d's partitions on "x", backed up on "s"), and the table a read
// returns while the coordinator has applied the update to the partitions
// below applied alone (updateRoutingCommandHandler's map order).
func tornTables(n int) (before, after olricdb.RoutingTable, torn func(applied int) olricdb.RoutingTable) {
	before, after = olricdb.RoutingTable{}, olricdb.RoutingTable{}
	names := []string{"d", "x", "s"}
	for p := range uint64(n) {
		o, b := names[p%3], names[(p+1)%3]
		before[p] = olricdb.Route{PrimaryOwners: []string{o}, ReplicaOwners: []string{b}}
		if o == "d" {
			o, b = "x", "s"
		}
		if b == "d" {
			b = "x"
			if o == "x" {
				b = "s"
			}
		}
		after[p] = olricdb.Route{PrimaryOwners: []string{o}, ReplicaOwners: []string{b}}
	}
	torn = func(applied int) olricdb.RoutingTable {
		t := olricdb.RoutingTable{}
		for p := range uint64(n) {
			t[p] = before[p]
			if int(p) < applied {
				t[p] = after[p]
			}
		}
		return t
	}
	return before, after, torn
}

// TestRoutingReadTorn: a refresh never uses a table no update produced.
// Olric's coordinator applies a routing update partition by partition
// while it answers routing reads, so a read may return the table half
// applied: some of a killed member's partitions moved, the rest still
// its, the member present for markLost and its absent buckets started
// full (TestCrash, ReplicaCount 1 and 2, under load). The reads below
// are what Olric returns, one after the other, around such an update.
func TestRoutingReadTorn(t *testing.T) {
	const n = 30
	before, after, torn := tornTables(n)
	for _, tc := range []struct {
		name  string
		reads []olricdb.RoutingTable
		want  olricdb.RoutingTable // nil: errRoutingTorn
	}{
		{"a steady table", []olricdb.RoutingTable{before, before}, before},
		{"the first read torn", []olricdb.RoutingTable{torn(7), after, after}, after},
		{"the update ends between two reads", []olricdb.RoutingTable{before, after, after}, after},
		{"two torn reads, then the update ends", []olricdb.RoutingTable{torn(7), torn(19), after, after}, after},
		{"torn at every read", []olricdb.RoutingTable{torn(3), torn(9), torn(15), torn(21), after, after}, nil},
		{"updates back and forth", []olricdb.RoutingTable{before, after, before, after, before}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			i := 0
			read := func(context.Context) (olricdb.RoutingTable, error) {
				if i == len(tc.reads) {
					t.Fatalf("read %d: more reads than the script has", i+1)
				}
				i++
				return tc.reads[i-1], nil
			}
			got, err := stableRoutes(context.Background(), read)
			if tc.want == nil {
				if !errors.Is(err, errRoutingTorn) {
					t.Fatalf("got %s, err %v; want errRoutingTorn", describe(got, before, after), err)
				}
				if i > stableReads {
					t.Fatalf("%d reads, at most %d", i, stableReads)
				}
				return
			}
			if err != nil {
				t.Fatalf("err %v, want the table %s", err, describe(tc.want, before, after))
			}
			if !sameRoutes(got, tc.want) {
				t.Fatalf("got %s, want %s", describe(got, before, after), describe(tc.want, before, after))
			}
		})
	}
}

// TestRoutingReadError: a read's error ends the refresh with it, whether
// the first read or a later one failed.
func TestRoutingReadError(t *testing.T) {
	boom := errors.New("coordinator gone")
	for fail := range 2 {
		i := 0
		read := func(context.Context) (olricdb.RoutingTable, error) {
			i++
			if i == fail+1 {
				return nil, boom
			}
			return olricdb.RoutingTable{0: {PrimaryOwners: []string{"x"}}}, nil
		}
		if _, err := stableRoutes(context.Background(), read); !errors.Is(err, boom) {
			t.Errorf("read %d failing: err %v, want %v", fail+1, err, boom)
		}
	}
}

// describe names a routing table for a failure message: before, after,
// or how many partitions it gives to which owner.
func describe(rt, before, after olricdb.RoutingTable) string {
	switch {
	case rt == nil:
		return "no table"
	case sameRoutes(rt, before):
		return "the table before the update"
	case sameRoutes(rt, after):
		return "the table after it"
	}
	count := map[string]int{}
	for _, r := range rt {
		if len(r.PrimaryOwners) > 0 {
			count[r.PrimaryOwners[len(r.PrimaryOwners)-1]]++
		}
	}
	return fmt.Sprintf("a torn table (owners %v)", count)
}
