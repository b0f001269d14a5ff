package olric

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/bucketgrid/bucketgrid/grid/olric/internal/lost"
)

// TestLostStateInvalid: a LostState that is none of the constants fails
// Start before anything starts.
func TestLostStateInvalid(t *testing.T) {
	c := DefaultLocalConfig()
	c.LostState = LostState(7)
	if _, err := c.withDefaults(); !errors.Is(err, ErrLostState) {
		t.Fatalf("withDefaults: %v, want ErrLostState", err)
	}
}

// part is what one routing read says of one partition: Olric's owner list
// (previous owners still holding data, then the owner) and its backups.
type part struct{ owners, replicas []string }

// read builds the routing read of one partition that markLost judges.
func read(p part) *routes {
	r := &routes{owners: make([]string, 1), history: make([]string, 1), holders: make([]string, 1),
		replicas: make([]string, 1), lostAt: make([]int64, 1), watch: make([]lost.Watch, 1)}
	if len(p.owners) > 0 {
		r.owners[0] = p.owners[len(p.owners)-1]
		r.history[0] = strings.Join(p.owners, ",")
		r.holders[0] = strings.Join(append(slices.Clip(p.owners), p.replicas...), ",")
		r.replicas[0] = strings.Join(p.replicas, ",")
	}
	return r
}

// TestLostTakeoverSequences feeds the taker "s" sequences of routing reads
// of one partition, as a machine starved of CPU can show them, and checks
// when s records the partition lost (the instant of the read that proved
// it, 0 for never). Each read lists the members holding data in it
// (present: those owning a partition, see lost.Takeover). The owner "d"
// is killed; "x" and "s" live. Before, a partition that the killed
// owner's death handed to x first and x handed on to s (a second
// rebalance, once a starved member's gossip settles) reached s with no
// record that its state was lost: its absent buckets started full.
func TestLostTakeoverSequences(t *testing.T) {
	type step struct {
		part    part
		present []string
		want    int64 // s's lostAt after this read, when s owns the partition
	}
	// An owner change stays watched for two reads (markLost's window).
	const window = 2
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"the owner killed, s takes over", []step{
			{part{owners: []string{"d"}}, []string{"d", "x", "s"}, 0},
			{part{owners: []string{"s"}}, []string{"x", "s"}, 2},
		}},
		{"the owner killed, x takes over, then hands to s", []step{
			{part{owners: []string{"d"}}, []string{"d", "x", "s"}, 0},
			{part{owners: []string{"x"}}, []string{"x", "s"}, 0},
			{part{owners: []string{"x", "s"}}, []string{"x", "s"}, 2},
			{part{owners: []string{"s"}}, []string{"x", "s"}, 2},
		}},
		{"the owner killed, x takes over and hands to s before moving data", []step{
			{part{owners: []string{"d"}}, []string{"d", "x", "s"}, 0},
			{part{owners: []string{"x"}}, []string{"x", "s"}, 0},
			{part{owners: []string{"s"}}, []string{"x", "s"}, 2},
		}},
		{"the owner killed while Olric lists it, x takes over, then hands to s", []step{
			{part{owners: []string{"d"}}, []string{"d", "x", "s"}, 0},
			{part{owners: []string{"d", "x"}}, []string{"x", "s"}, 0},
			{part{owners: []string{"d", "x", "s"}}, []string{"x", "s"}, 2},
		}},
		{"a living owner hands over", []step{
			{part{owners: []string{"x"}}, []string{"x", "s"}, 0},
			{part{owners: []string{"x", "s"}}, []string{"x", "s"}, 0},
			{part{owners: []string{"s"}}, []string{"x", "s"}, 0},
		}},
		{"the owner killed, its backup x takes over, then hands to s", []step{
			{part{owners: []string{"d"}, replicas: []string{"x"}}, []string{"d", "x", "s"}, 0},
			{part{owners: []string{"x"}, replicas: []string{"s"}}, []string{"x", "s"}, 0},
			{part{owners: []string{"x", "s"}, replicas: []string{"x"}}, []string{"x", "s"}, 0},
		}},
		// TestCrash (ReplicaCount 1, -race): Olric's coordinator applies a
		// new table one partition at a time, in map order, while it serves
		// routing reads, so s read some of the killed d's partitions moved
		// to it while d still owned others (present), and the next read,
		// without d, showed nothing changing hands.
		{"the owner killed, a torn read moves the partition while d owns others", []step{
			{part{owners: []string{"d"}}, []string{"d", "x", "s"}, 0},
			{part{owners: []string{"s"}}, []string{"d", "x", "s"}, 0},
			{part{owners: []string{"s"}}, []string{"x", "s"}, 3},
			{part{owners: []string{"s"}}, []string{"x", "s"}, 3},
		}},
		{"the owner killed, a torn read moves the partition to x, which hands it to s", []step{
			{part{owners: []string{"d"}}, []string{"d", "x", "s"}, 0},
			{part{owners: []string{"x"}}, []string{"d", "x", "s"}, 0},
			{part{owners: []string{"x", "s"}}, []string{"d", "x", "s"}, 0},
			{part{owners: []string{"s"}}, []string{"x", "s"}, 4},
		}},
		// Olric lists a living previous owner until its data moved, so one
		// unlisted at once held none; if it leaves soon after, its
		// partition's absent buckets start empty all the same (an
		// under-admission), and once the window passed they do not.
		{"a living owner hands over unlisted and leaves at once", []step{
			{part{owners: []string{"x"}}, []string{"x", "d", "s"}, 0},
			{part{owners: []string{"s"}}, []string{"x", "d", "s"}, 0},
			{part{owners: []string{"s"}}, []string{"d", "s"}, 3},
		}},
		{"a living owner hands over unlisted and leaves later", []step{
			{part{owners: []string{"x"}}, []string{"x", "d", "s"}, 0},
			{part{owners: []string{"s"}}, []string{"x", "d", "s"}, 0},
			{part{owners: []string{"s"}}, []string{"x", "d", "s"}, 0},
			{part{owners: []string{"s"}}, []string{"x", "d", "s"}, 0},
			{part{owners: []string{"s"}}, []string{"d", "s"}, 0},
		}},
		{"s reads through d, d killed, Olric keeps listing it", []step{
			{part{owners: []string{"d"}}, []string{"d", "x", "s"}, 0},
			{part{owners: []string{"d", "s"}}, []string{"d", "x", "s"}, 0},
			{part{owners: []string{"d", "s"}}, []string{"x", "s"}, 3},
			{part{owners: []string{"d", "s"}}, []string{"x", "s"}, 3},
			{part{owners: []string{"s"}}, []string{"x", "s"}, 3},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var prev *routes
			for i, st := range tc.steps {
				nr := read(st.part)
				present := map[string]struct{}{}
				for _, name := range st.present {
					present[name] = struct{}{}
				}
				markLost(prev, nr, present, int64(i+1), window)
				if nr.owners[0] == "s" && nr.lostAt[0] != st.want {
					t.Errorf("read %d (owners %v, present %v): s's lostAt %d, want %d", i+1, st.part.owners, st.present, nr.lostAt[0], st.want)
				}
				prev = nr
			}
		})
	}
}
