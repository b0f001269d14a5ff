package olric

import (
	"bytes"
	"strings"
	"testing"
)

// TestRoutingChangeLogged: a read that loses a member and records
// partitions lost says so in one line, naming the new owner and the
// partitions; a read that changes nothing logs nothing.
func TestRoutingChangeLogged(t *testing.T) {
	var buf bytes.Buffer
	rtr := &router{m: &Member{cfg: Config{LogOutput: &buf}}}
	prev := &routes{owners: []string{"a", "b", "c"}, lostAt: make([]int64, 3),
		present: map[string]struct{}{"a": {}, "b": {}, "c": {}}}
	nr := &routes{owners: []string{"a", "b", "b"}, lostAt: []int64{0, 0, 42},
		present: map[string]struct{}{"a": {}, "b": {}}}
	rtr.logRoutingChange(prev, nr, 42, false)
	got := buf.String()
	for _, want := range []string{"gone [c]", `1 partitions lost, now owned by "b": [2]`} {
		if !strings.Contains(got, want) {
			t.Errorf("log %q lacks %q", got, want)
		}
	}
	buf.Reset()
	next := &routes{owners: nr.owners, lostAt: nr.lostAt, present: nr.present}
	rtr.logRoutingChange(nr, next, 43, false)
	if buf.Len() != 0 {
		t.Errorf("a read that changed nothing logged %q", buf.String())
	}
}
