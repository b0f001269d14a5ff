package main

import (
	"strconv"
	"strings"
	"testing"
)

// TestHeapFloorFlag: the service binary keeps -gc-heap-floor by raising
// GOGC above the operator's while its live heap is small (as
// go_gc_gogc_percent shows), leaves Go's own rule with -gc-heap-floor 0, and
// keeps an operator's explicit GOGC: off stays off, and 50 stays 50 without
// a floor.
func TestHeapFloorFlag(t *testing.T) {
	dir := writeConfig(t, t.TempDir(), map[string]string{"srv.yaml": serverConfig})
	for _, tc := range []struct {
		gogc  string // the environment's GOGC; "" unset
		args  []string
		check func(p float64) bool
		want  string
	}{
		{"", nil, func(p float64) bool { return p > 100 }, "above 100: the default floor holds a small heap up"},
		{"", []string{"-gc-heap-floor", "0"}, func(p float64) bool { return p == 100 }, "100"},
		{"off", nil, func(p float64) bool { return p == 1<<64-1 }, "off: -1, as the runtime's unsigned metric shows it, 2^64 − 1"},
		{"50", []string{"-gc-heap-floor", "0"}, func(p float64) bool { return p == 50 }, "the operator's 50"},
		{"50", nil, func(p float64) bool { return p > 50 }, "above 50"},
	} {
		t.Run("GOGC="+tc.gogc+" "+strconv.Quote(strings.Join(tc.args, " ")), func(t *testing.T) {
			t.Setenv("GOGC", tc.gogc)
			p := startProc(t, gridPort(t), nil, append([]string{"-config", dir, "-backend", "memory"}, tc.args...)...)
			got, ok := metricValues(t, "http://"+p.httpAddr+"/metrics")["go_gc_gogc_percent"]
			if !ok || !tc.check(got) {
				t.Errorf("go_gc_gogc_percent %v (exported: %v), want %s", got, ok, tc.want)
			}
		})
	}
}
