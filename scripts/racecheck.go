//go:build ignore

// Racecheck reads the output of `go test -race` for several packages (on
// standard input) and prints the failed packages whose only failures are
// known upstream data races: every race they report matches one of the
// signatures below, by the functions on its two access stacks. Each such
// package is printed on a line of its own with a -run pattern of its failed
// tests, separated by a tab; scripts/test runs those tests once more. Any
// other failure, and any race that matches no signature (in this module or
// in a dependency), is final.
//
// Delete this file, and its use in scripts/test, the day the races below
// are fixed upstream (each names the version that has it): a signature that
// no longer occurs forgives nothing, but it must not outlive its reason.
//
//	go run scripts/racecheck.go < .servers/test.log
package main

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"strings"
)

// signature names an upstream race by a function on each of its two access
// stacks, in either order.
type signature struct {
	name string
	a, b string
}

// known lists the upstream races forgiven, each one named.
var known = []signature{{
	// Olric v0.7.4: a member stopped right after it started serves the
	// routing-table push of its own join after RoutingTable.Shutdown waited
	// for its goroutines: the handler's wg.Add races with Shutdown's wg.Wait.
	name: "olric v0.7.4: routing-table push served after RoutingTable.Shutdown's wg.Wait",
	a:    "olric/internal/cluster/routingtable.(*RoutingTable).updateRoutingCommandHandler",
	b:    "olric/internal/cluster/routingtable.(*RoutingTable).Shutdown",
}, {
	// Olric v0.7.4 with memberlist v0.5.3: Discovery.GetMembers reads the
	// *Node records memberlist.Members returned after memberlist released
	// nodeLock, while aliveNode rewrites an existing record's Meta under
	// it (a member that joins again, or gossips a new incarnation).
	name: "olric v0.7.4: Discovery.GetMembers reads node metadata memberlist's aliveNode rewrites",
	a:    "olric/internal/discovery.(*Discovery).GetMembers",
	b:    "memberlist.(*Memberlist).aliveNode",
}}

var (
	pkgLine    = regexp.MustCompile(`^(ok|FAIL|\?)\s+(\S+)`)
	accessLine = regexp.MustCompile(`(?i)^(previous )?(atomic )?(read|write) at \S+ by (goroutine \d+|main goroutine)`)
	createLine = regexp.MustCompile(`^Goroutine (\d+) \(\w+\) created at:$`)
	testError  = regexp.MustCompile(`^\s+\S+\.go:\d+: `)
	failedTest = regexp.MustCompile(`^--- FAIL: (\S+) \(`)
	raceError  = regexp.MustCompile(`^\s+testing\.go:\d+: race detected during execution of test$`)
)

func main() {
	var block []string
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		m := pkgLine.FindStringSubmatch(line)
		if m == nil {
			block = append(block, line)
			continue
		}
		if m[1] == "FAIL" && onlyKnownRaces(block) {
			var tests []string
			for _, l := range block {
				if f := failedTest.FindStringSubmatch(l); f != nil {
					tests = append(tests, regexp.QuoteMeta(f[1]))
				}
			}
			if len(tests) > 0 {
				fmt.Printf("%s\t^(%s)$\n", m[2], strings.Join(tests, "|"))
			}
		}
		block = block[:0]
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "racecheck:", err)
		os.Exit(2)
	}
}

// onlyKnownRaces reports whether the output of one failed package shows at
// least one data race, no failure but races, and only races of known
// signatures. It names each race it forgives on standard error.
func onlyKnownRaces(lines []string) bool {
	races := 0
	var r race // the race being read
	var cur *string
	judge := func() bool {
		if len(r.access) == 0 {
			return true
		}
		s := match(r.stacks())
		r = race{}
		if s == nil {
			return false
		}
		fmt.Fprintln(os.Stderr, "racecheck: known upstream race:", s.name)
		return true
	}
	for _, l := range lines {
		if m := accessLine.FindStringSubmatch(l); m != nil {
			r.access = append(r.access, access{goroutine: m[4]})
			cur = &r.access[len(r.access)-1].stack
			continue
		}
		if m := createLine.FindStringSubmatch(l); m != nil {
			r.flush()
			r.pendingID, r.pending = "goroutine "+m[1], ""
			cur = &r.pending
			continue
		}
		switch {
		case l == "WARNING: DATA RACE":
			if !judge() {
				return false
			}
			races++
			cur = nil
			continue
		case strings.HasPrefix(l, "panic:"), strings.HasPrefix(l, "fatal error:"),
			strings.HasPrefix(l, "FAIL\t"), strings.Contains(l, "test timed out"):
			return false
		case testError.MatchString(l) && !raceError.MatchString(l):
			return false
		}
		if cur == nil {
			continue
		}
		if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "=====") {
			r.flush()
			cur = nil
			continue
		}
		*cur += l + "\n"
	}
	r.flush()
	return judge() && races > 0
}

// access is one of a race's two memory accesses: the goroutine that made it
// and its stack.
type access struct {
	goroutine string
	stack     string
}

// race is one data race report being read: its accesses and the stacks
// where their goroutines were created.
type race struct {
	access    []access
	created   map[string]string
	pendingID string // the goroutine whose creation stack is being read
	pending   string
}

// flush files the creation stack being read under its goroutine.
func (r *race) flush() {
	if r.pendingID == "" {
		return
	}
	if r.created == nil {
		r.created = map[string]string{}
	}
	r.created[r.pendingID] = r.pending
	r.pendingID, r.pending = "", ""
}

// stacks returns each access's stack. An access whose stack holds runtime
// frames only (a goroutine that had finished when the race was reported:
// the race detector kept no more of its stack) is named by the stack that
// created its goroutine instead, so a signature can still recognise it.
func (r *race) stacks() []string {
	out := make([]string, len(r.access))
	for i, a := range r.access {
		out[i] = a.stack
		if runtimeOnly(a.stack) {
			out[i] += r.created[a.goroutine]
		}
	}
	return out
}

// runtimeOnly reports whether a stack's frames are all the runtime's.
func runtimeOnly(stack string) bool {
	for _, l := range strings.Split(stack, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "/") || strings.HasPrefix(l, "<autogenerated>") {
			continue // a file line
		}
		if !strings.HasPrefix(l, "runtime.") {
			return false
		}
	}
	return true
}

// match returns the signature the two access stacks of one race fit, or nil.
func match(stacks []string) *signature {
	if len(stacks) != 2 {
		return nil
	}
	for i := range known {
		s := &known[i]
		if strings.Contains(stacks[0], s.a) && strings.Contains(stacks[1], s.b) ||
			strings.Contains(stacks[0], s.b) && strings.Contains(stacks[1], s.a) {
			return s
		}
	}
	return nil
}
