//go:build ignore

// Racecheck reads the output of `go test -race` for several packages (on
// standard input) and prints the failed packages whose only failures are
// data races between goroutines of dependencies: races whose reported
// accesses (both stacks) hold no frame of this module. Each such package is
// printed on a line of its own with a -run pattern of its failed tests,
// separated by a tab. scripts/test runs those tests again; any other
// failure is final.
//
// Olric v0.7.4 has such races at shutdown (a routing-table push still being
// served after its RoutingTable.Shutdown waited for its goroutines, whose
// handler then calls WaitGroup.Add), which this module cannot fix.
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

const module = "github.com/bucketgrid/bucketgrid"

var (
	pkgLine    = regexp.MustCompile(`^(ok|FAIL|\?)\s+(\S+)`)
	accessLine = regexp.MustCompile(`(?i)^(previous )?(atomic )?(read|write) at `)
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
		if m[1] == "FAIL" && onlyForeignRaces(block) {
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

// onlyForeignRaces reports whether the output of one failed package shows
// at least one data race, no failure but races, and no race whose accesses
// run code of this module.
func onlyForeignRaces(lines []string) bool {
	races := 0
	inAccess := false
	for _, l := range lines {
		switch {
		case l == "WARNING: DATA RACE":
			races++
		case accessLine.MatchString(l):
			inAccess = true
			continue
		case strings.HasPrefix(l, "panic:"), strings.HasPrefix(l, "fatal error:"),
			strings.HasPrefix(l, "FAIL\t"), strings.Contains(l, "test timed out"):
			return false
		case testError.MatchString(l) && !raceError.MatchString(l):
			return false
		}
		if inAccess {
			if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "Goroutine ") {
				inAccess = false
			} else if strings.Contains(l, module+"/") || strings.Contains(l, module+".") {
				return false
			}
		}
	}
	return races > 0
}
