package olric

import (
	"fmt"
	"slices"
	"strings"
)

// logRoutingChange writes one line to Config.LogOutput for a routing read
// that changed the members holding data, recorded partitions lost (an owner
// gone with no copy left: their absent buckets start as LostState says), or
// handed everything over (a split's end, a stale read of the member's own
// table): the events that decide what a fault costs, which an operator
// reading the logs after one needs, and which a failed fault test prints.
// Nothing for a read that changed none of them, so a steady cluster logs
// nothing.
func (rt *router) logRoutingChange(prev, nr *routes, now int64, handover bool) {
	m := rt.m
	if prev == nil || m.cfg.LogOutput == nil {
		return
	}
	var joined, left []string
	for name := range nr.present {
		if _, ok := prev.present[name]; !ok {
			joined = append(joined, name)
		}
	}
	for name := range prev.present {
		if _, ok := nr.present[name]; !ok {
			left = append(left, name)
		}
	}
	lost := map[string][]int{} // new owner -> partitions lost now
	for p, at := range nr.lostAt {
		if at == now && prev.lostAt[p] != now {
			lost[nr.owners[p]] = append(lost[nr.owners[p]], p)
		}
	}
	if len(joined)+len(left)+len(lost) == 0 && !handover {
		return
	}
	var b strings.Builder
	b.WriteString("routing:")
	if len(joined) > 0 {
		slices.Sort(joined)
		fmt.Fprintf(&b, " holding data now %v;", joined)
	}
	if len(left) > 0 {
		slices.Sort(left)
		fmt.Fprintf(&b, " gone %v;", left)
	}
	if handover {
		b.WriteString(" a hand-over of everything (a split's end or a stale read);")
	}
	owners := make([]string, 0, len(lost))
	for o := range lost {
		owners = append(owners, o)
	}
	slices.Sort(owners)
	for _, o := range owners {
		fmt.Fprintf(&b, " %d partitions lost, now owned by %q: %v;", len(lost[o]), o, lost[o])
	}
	m.logf("%s", strings.TrimSuffix(b.String(), ";"))
}
