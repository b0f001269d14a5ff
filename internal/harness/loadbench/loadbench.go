// Package loadbench drives the benchmarks that compare bucket checks
// against a store's server side by side: concurrent callers, checks spread
// over keys, and the figures that make such a comparison honest —
// throughput, latency percentiles, CPU per check on both sides of the wire,
// and round trips per check.
package loadbench

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Load is one benchmark's work.
type Load struct {
	// Callers is the number of goroutines checking at once.
	Callers int
	// Keys is the number of keys; check i goes to key i mod Keys.
	Keys int
	// Check makes one check on key number k and reports whether it was
	// admitted.
	Check func(ctx context.Context, k int) (bool, error)
	// ServerCPU, when set, returns the CPU time the server processes have
	// used so far (see ProcessCPU).
	ServerCPU func() time.Duration
	// Trips, when set, returns the round trips to the server made so far.
	Trips func() int64
}

// Run makes b.N checks of l and reports checks/s, p50-µs, p99-µs,
// client-cpu-µs/check (this process: the callers, the client library and
// the benchmark itself), server-cpu-µs/check and cpu-µs/check (the two
// added) when ServerCPU is set, and round-trips/check when Trips is set.
// It fails the benchmark if a check fails, and returns how many checks
// each key admitted, for the caller to verify against the store.
func Run(b *testing.B, l Load) (admitted []int64) {
	b.Helper()
	counts := make([]atomic.Int64, l.Keys)
	lat := make([][]time.Duration, l.Callers)
	var next, failed atomic.Int64
	var firstErr atomic.Value
	ctx := context.Background()
	b.ResetTimer()
	var server0 time.Duration
	if l.ServerCPU != nil {
		server0 = l.ServerCPU()
	}
	var trips0 int64
	if l.Trips != nil {
		trips0 = l.Trips()
	}
	client0 := SelfCPU()
	start := time.Now()
	var wg sync.WaitGroup
	for c := range l.Callers {
		lat[c] = make([]time.Duration, 0, b.N/l.Callers+1)
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				k := int(i % int64(l.Keys))
				t0 := time.Now()
				ok, err := l.Check(ctx, k)
				lat[c] = append(lat[c], time.Since(t0))
				switch {
				case err != nil:
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
				case ok:
					counts[k].Add(1)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	client := SelfCPU() - client0
	var server time.Duration
	if l.ServerCPU != nil {
		server = l.ServerCPU() - server0
	}
	var trips int64
	if l.Trips != nil {
		trips = l.Trips() - trips0
	}
	b.StopTimer()
	if f := failed.Load(); f > 0 {
		b.Fatalf("%d of %d checks failed; first: %v", f, b.N, firstErr.Load())
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	pct := func(p float64) float64 {
		return float64(all[min(len(all)-1, int(p*float64(len(all))))].Nanoseconds()) / 1e3
	}
	n := float64(b.N)
	b.ReportMetric(n/elapsed.Seconds(), "checks/s")
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
	b.ReportMetric(float64(client.Nanoseconds())/1e3/n, "client-cpu-µs/check")
	if l.ServerCPU != nil {
		b.ReportMetric(float64(server.Nanoseconds())/1e3/n, "server-cpu-µs/check")
		b.ReportMetric(float64((client+server).Nanoseconds())/1e3/n, "cpu-µs/check")
	}
	if l.Trips != nil {
		b.ReportMetric(float64(trips)/n, "round-trips/check")
	}
	admitted = make([]int64, l.Keys)
	for i := range counts {
		admitted[i] = counts[i].Load()
	}
	return admitted
}

// Expected returns how many of n checks Run sends to each of keys keys.
func Expected(n, keys int) []int64 {
	want := make([]int64, keys)
	for k := range want {
		want[k] = int64(n / keys)
		if k < n%keys {
			want[k]++
		}
	}
	return want
}

// SelfCPU returns the user and system CPU time this process has used.
func SelfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ProcessCPU returns the user and system CPU time the processes pids have
// used, from /proc/<pid>/stat.
func ProcessCPU(pids ...int) (time.Duration, error) {
	var total time.Duration
	for _, pid := range pids {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return 0, err
		}
		// the fields after the command name, which is in parentheses
		s := string(stat)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		utime, _ := strconv.ParseInt(f[11], 10, 64)
		stime, _ := strconv.ParseInt(f[12], 10, 64)
		total += time.Duration(utime+stime) * (time.Second / 100) // USER_HZ
	}
	return total, nil
}

// PidListening returns the pid of the process named name (its command line
// starts with it) that listens on addr (host:port), as redis-server shows
// it in its command line ("redis-server 127.0.0.1:6379"), or 0.
func PidListening(name, addr string) int {
	_, port, _ := strings.Cut(addr, ":")
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile("/proc/" + d.Name() + "/cmdline")
		args := strings.Fields(strings.ReplaceAll(string(cmdline), "\x00", " "))
		if len(args) > 0 && strings.Contains(args[0], name) &&
			(slices.Contains(args, addr) || slices.Contains(args, port) || slices.Contains(args, "*:"+port) ||
				slices.ContainsFunc(args, func(a string) bool { return strings.HasSuffix(a, ":"+port) })) {
			return pid
		}
	}
	return 0
}

// PidFromEnv returns the pid held by the environment variable name
// (scripts/servers.sh exports REDIS_PID, FERRETDB_PID and GOCAVES_PID), or
// 0 when it is unset or not a number.
func PidFromEnv(name string) int {
	pid, _ := strconv.Atoi(os.Getenv(name))
	return pid
}

// ServerCPU returns a Load.ServerCPU function for the process pid, or nil
// when pid is 0; it fails b when the process cannot be read.
func ServerCPU(b *testing.B, pid int) func() time.Duration {
	if pid == 0 {
		b.Logf("no server pid: server CPU is not reported")
		return nil
	}
	return func() time.Duration {
		d, err := ProcessCPU(pid)
		if err != nil {
			b.Fatalf("server CPU of pid %d: %v", pid, err)
		}
		return d
	}
}
