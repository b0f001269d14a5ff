package couchbase_test

import (
	"testing"

	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/internal/harness/loadbench"
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
	loadbench.HotKey(b, func(b *testing.B) cas.Store { return newStoreOn(b, srv) })
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
