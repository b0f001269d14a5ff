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
// With -members it judges every race report on standard input instead, in
// passing tests too: the test bed's members are processes of their own,
// whose races reach the output on their standard error and fail no test.
// It names each known one on standard error, prints every other one, and
// exits with status 1 if there was any.
//
// Delete this file, and its use in scripts/test, the day the races below
// are fixed upstream (each names the version that has it): a signature that
// no longer occurs forgives nothing, but it must not outlive its reason.
//
//	go run scripts/racecheck.go < .servers/test.log
//	go run scripts/racecheck.go -members < .servers/test-bed-race.log
package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
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
	// Olric v0.7.4: the same with a fragment move (its balancer's, or a
	// member's leaving) received while the member stops: with cluster
	// events on, moveFragmentCommandHandler calls the DMap service's
	// wg.Add to publish its event after dmap.Service.Shutdown began its
	// wg.Wait.
	name: "olric v0.7.4: fragment move served after dmap.Service.Shutdown's wg.Wait",
	a:    "olric/internal/dmap.(*Service).moveFragmentCommandHandler",
	b:    "olric/internal/dmap.(*Service).Shutdown",
}, {
	// Olric v0.7.4 with memberlist v0.5.3: Discovery.GetMembers reads the
	// *Node records memberlist.Members returned after memberlist released
	// nodeLock, while aliveNode rewrites an existing record's Meta under
	// it (a member that joins again, or gossips a new incarnation).
	name: "olric v0.7.4: Discovery.GetMembers reads node metadata memberlist's aliveNode rewrites",
	a:    "olric/internal/discovery.(*Discovery).GetMembers",
	b:    "memberlist.(*Memberlist).aliveNode",
}, {
	// The same race seen from the bytes of the new metadata: GetMembers
	// decodes them, and their last write was the decode of the alive
	// message in handleAlive, whose Meta aliveNode installs as it is (the
	// test bed's members report it so).
	name: "olric v0.7.4: Discovery.GetMembers reads node metadata memberlist's handleAlive decoded",
	a:    "olric/internal/discovery.(*Discovery).GetMembers",
	b:    "memberlist.(*Memberlist).handleAlive",
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
	if len(os.Args) > 1 && os.Args[1] == "-members" {
		for sc.Scan() {
			block = append(block, sc.Text())
		}
		if err := sc.Err(); err != nil {
			fmt.Fprintln(os.Stderr, "racecheck:", err)
			os.Exit(2)
		}
		if _, ok := knownRaces(block, true, ""); !ok {
			os.Exit(1)
		}
		return
	}
	for sc.Scan() {
		line := sc.Text()
		m := pkgLine.FindStringSubmatch(line)
		if m == nil {
			block = append(block, line)
			continue
		}
		if m[1] == "FAIL" && onlyKnownRaces(block, packageDir(m[2])) {
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
func onlyKnownRaces(lines []string, dir string) bool {
	races, ok := knownRaces(lines, false, dir)
	return ok && races > 0
}

// knownRaces counts the races in lines and reports whether all are of
// known signatures and, unless racesOnly, nothing else failed. With
// racesOnly it reads on after an unknown race and prints each.
func knownRaces(lines []string, racesOnly bool, dir string) (races int, ok bool) {
	ok = true
	var report []string // the race being read, printed if unknown
	var r race          // the race being read
	var cur *string
	judge := func() bool {
		if len(r.access) == 0 {
			return true
		}
		s := match(r.stacks())
		r = race{}
		if s == nil {
			if racesOnly {
				fmt.Println(strings.Join(report, "\n"))
			}
			return false
		}
		fmt.Fprintln(os.Stderr, "racecheck: known upstream race:", s.name)
		return true
	}
	for _, l := range lines {
		if m := accessLine.FindStringSubmatch(l); m != nil {
			r.access = append(r.access, access{goroutine: m[4]})
			cur = &r.access[len(r.access)-1].stack
			report = append(report, l)
			continue
		}
		if m := createLine.FindStringSubmatch(l); m != nil {
			r.flush()
			r.pendingID, r.pending = "goroutine "+m[1], ""
			cur = &r.pending
			report = append(report, l)
			continue
		}
		switch {
		case l == "WARNING: DATA RACE":
			if !judge() {
				if !racesOnly {
					return races, false
				}
				ok = false
			}
			races++
			cur, report = nil, []string{l}
			continue
		case racesOnly:
		case strings.HasPrefix(l, "panic:"), strings.HasPrefix(l, "fatal error:"),
			strings.HasPrefix(l, "FAIL\t"), strings.Contains(l, "test timed out"):
			return races, false
		case testError.MatchString(l) && !raceError.MatchString(l) && !logCall(dir, l):
			return races, false
		}
		if cur == nil {
			continue
		}
		report = append(report, l)
		if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "=====") {
			r.flush()
			cur = nil
			continue
		}
		*cur += l + "\n"
	}
	r.flush()
	return races, judge() && ok
}

// module is this repository's module path: a package's directory is its
// import path without it.
const module = "github.com/bucketgrid/bucketgrid"

// packageDir returns the directory of the package with import path pkg,
// relative to the repository's root (where scripts/test runs).
func packageDir(pkg string) string {
	return "." + strings.TrimPrefix(pkg, module)
}

// sourceLine finds the file and line a test's output line names.
var sourceLine = regexp.MustCompile(`^\s+(\S+\.go):(\d+): `)

// logCall reports whether a failed test's output line l (file:line:
// message) was written by a t.Log or t.Logf call in the package's
// directory dir, read from the source: go test prints a failed test's
// logs as it prints its errors, and a test that failed only by a race
// prints its logs too. Anything else (t.Error, t.Fatal, a helper's call
// site, a file not found) counts as a failure.
func logCall(dir, l string) bool {
	m := sourceLine.FindStringSubmatch(l)
	if dir == "" || m == nil {
		return false
	}
	n, err := strconv.Atoi(m[2])
	if err != nil {
		return false
	}
	src, err := os.ReadFile(filepath.Join(dir, m[1]))
	if err != nil {
		return false
	}
	lines := strings.Split(string(src), "\n")
	if n < 1 || n > len(lines) {
		return false
	}
	call := strings.TrimSpace(lines[n-1])
	return strings.HasPrefix(call, "t.Log(") || strings.HasPrefix(call, "t.Logf(")
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
