package couchbase_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/internal/harness/loadbench"
	"github.com/bucketgrid/bucketgrid/retry"
	"github.com/bucketgrid/bucketgrid/tck"
)

// BenchmarkHotKey measures bucket checks (TryConsume of 1 token) on one hot
// key through the cas executor, for 1 and 8 concurrent clients, immediate
// retry against backoff with jitter (default and 1 s budgets). Reported:
// checks/s, p50 and p99 latency, attempts per check, and the share of checks
// that gave up.
//
//	scripts/servers.sh start && . .servers/env
//	go test -run '^$' -bench HotKey -benchtime 2000x ./grid/couchbase
func BenchmarkHotKey(b *testing.B) {
	srv := couchbaseServer(b)
	strategies := []struct {
		name string
		s    func() retry.Strategy
	}{
		{"immediate", func() retry.Strategy { return retry.Immediate(100) }},
		{"backoff", retry.Default},
		// A longer budget than the default's 500 ms, for round trips of
		// several milliseconds.
		{"backoff-1s", func() retry.Strategy { return retry.Backoff(retry.BackoffConfig{Budget: time.Second}) }},
	}
	for _, clients := range []int{1, 8} {
		for _, st := range strategies {
			b.Run(fmt.Sprintf("clients=%d/%s", clients, st.name), func(b *testing.B) {
				tck.BenchmarkHotKey(b, newStoreOn(b, srv), clients, cas.WithRetry(st.s()))
			})
		}
	}
}

// BenchmarkKeys is grid/redis's BenchmarkVersusLua without the Lua side:
// 16 callers on 1 key and on 10,000 keys, every check admitted and verified
// afterwards, through the executor as it was before its memory and
// pipelining ("before") and with them ("after"). Reported: checks/s, p50
// and p99, CPU per check of this process and of gocaves (GOCAVES_PID from
// scripts/servers.sh), and round trips per check.
//
//	scripts/servers.sh start && . .servers/env
//	go test -run '^$' -bench BenchmarkKeys -benchtime 20000x ./grid/couchbase
func BenchmarkKeys(b *testing.B) {
	srv := couchbaseServer(b)
	loadbench.BeforeAfter(b, []int{1, 10000}, func(b *testing.B) cas.Store { return newStoreOn(b, srv) },
		loadbench.ServerCPU(b, loadbench.PidFromEnv("GOCAVES_PID")))
}
