package mongo_test

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/internal/harness/loadbench"
)

// BenchmarkHotKey measures bucket checks (TryConsume of 1 token) on one hot
// key through the cas executor, for 1 and 8 concurrent clients, immediate
// retry against backoff with jitter (default and 1 s budgets). Through
// FerretDB the client has one connection (see TestTCK). Reported: checks/s,
// p50 and p99 latency, attempts per check, and the share of checks that gave
// up.
//
//	scripts/servers.sh start && . .servers/env
//	go test -run '^$' -bench HotKey -benchtime 400x ./grid/mongo
func BenchmarkHotKey(b *testing.B) {
	uri := mongoURI(b)
	loadbench.HotKey(b, func(b *testing.B) cas.Store { return newStoreURI(b, uri, 1) })
}

// BenchmarkKeys is grid/redis's BenchmarkVersusLua without the Lua side:
// 16 callers on 1 key and on many keys, every check admitted and verified
// afterwards, through the executor as it was before its memory and
// pipelining ("before"), with them ("after": the store is not a
// cas.Batcher, so that is memory alone), and over the Batching store
// ("batching"). Reported: checks/s, p50
// and p99, CPU per check of this process and of FerretDB (FERRETDB_PID from
// scripts/servers.sh), and round trips per check. Through FerretDB the
// client has one connection (see TestTCK), and 10,000 keys would take
// minutes to create, so the many-keys case has 1,000.
//
//	scripts/servers.sh start && . .servers/env
//	go test -run '^$' -bench BenchmarkKeys -benchtime 2000x ./grid/mongo
func BenchmarkKeys(b *testing.B) {
	uri := mongoURI(b)
	cpu := loadbench.ServerCPU(b, loadbench.PidFromEnv("FERRETDB_PID"))
	loadbench.BeforeAfter(b, []int{1, 1000}, func(b *testing.B) cas.Store { return newStoreURI(b, uri, 1) }, cpu)
	for _, keys := range []int{1, 1000} {
		b.Run(fmt.Sprintf("batching/keys=%d", keys), func(b *testing.B) {
			loadbench.CAS(b, newStoreURI(b, uri, 1).Batching(), 16, keys, cpu)
		})
	}
}

// BenchmarkKeysPostgreSQL is BenchmarkKeys on FerretDB's PostgreSQL handler
// (MONGODB_PG_URI), one operation at a time ("single", the store's default)
// at 1, 1,000 and 10,000 keys, and over the Batching store at 1 and 1,000:
// FerretDB does not push a find by _id $in down to PostgreSQL, so every
// batched read at 10,000 documents reads the whole collection (about 0.4 s),
// and creating the 10,000 buckets alone took 16 minutes. Server CPU is
// FerretDB's and PostgreSQL's (the postmaster and its backends).
//
//	scripts/servers.sh start && . .servers/env
//	go test -run '^$' -bench BenchmarkKeysPostgreSQL -benchtime 2000x ./grid/mongo
func BenchmarkKeysPostgreSQL(b *testing.B) {
	uri := mongoPGURI(b)
	cpu := pgServerCPU(b)
	for _, keys := range []int{1, 1000, 10000} {
		b.Run(fmt.Sprintf("single/keys=%d", keys), func(b *testing.B) {
			loadbench.CAS(b, newStoreURI(b, uri, 1), 16, keys, cpu)
		})
		if keys > 1000 {
			continue
		}
		b.Run(fmt.Sprintf("batching/keys=%d", keys), func(b *testing.B) {
			loadbench.CAS(b, newStoreURI(b, uri, 1).Batching(), 16, keys, cpu)
		})
	}
}

// pgServerCPU is the CPU of FerretDB on PostgreSQL (FERRETDB_PG_PID) and of
// PostgreSQL (POSTGRES_PID and its children), or nil without the pids.
func pgServerCPU(b *testing.B) func() time.Duration {
	ferret, pg := loadbench.PidFromEnv("FERRETDB_PG_PID"), loadbench.PidFromEnv("POSTGRES_PID")
	if ferret == 0 || pg == 0 {
		b.Logf("no server pids: server CPU is not reported")
		return nil
	}
	return func() time.Duration {
		pids := []int{ferret, pg}
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
			if err != nil {
				continue
			}
			// the parent pid is the second field after the command's ")"
			if f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:])); len(f) > 1 && f[1] == strconv.Itoa(pg) {
				pids = append(pids, pid)
			}
		}
		var sum time.Duration
		for _, pid := range pids {
			if d, err := loadbench.ProcessCPU(pid); err == nil {
				sum += d
			}
		}
		return sum
	}
}
