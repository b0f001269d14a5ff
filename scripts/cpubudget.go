//go:build ignore

// Cpubudget reads CPU profiles of the rate-limit service as `go tool pprof
// -traces` prints them (on standard input; several profiles may follow one
// another) and prints where the CPU went, by layer: the share of all samples,
// the share spent under a system call, and, with -cpu (the benchmark's
// server-cpu-µs/op of the same run), microseconds per check, each layer's
// split into its own work and its system calls, the gRPC layer by what the
// connection does (reading frames, protobuf, streams and messages on the
// handler's side, writing), and the system calls of all layers together.
//
// A sample belongs to the innermost frame (leaf first) of a known layer, so
// a system call or an allocation counts to the layer that made it; a stack
// of runtime frames alone is the scheduler's (finding, parking and waking
// goroutines), the garbage collector's, or other runtime work. The owner
// channel's functions in grid/olric (both ends: the caller's peer and pool,
// the owner's channel, their frames) are "hop"; the rest of
// grid/olric and the executor's Handle are "grid". docs/benchmarks.md gives
// the table and the commands:
//
//	for f in prof/BenchmarkRLS_bucketgrid-3_hot-*.pprof; do
//		go tool pprof -traces bucketgrid "$f"
//	done | go run scripts/cpubudget.go -cpu 149
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// layers in the order printed, each with the frames that belong to it;
// the first that matches a frame decides.
var layers = []struct {
	name string
	re   *regexp.Regexp
}{
	{"hop", regexp.MustCompile(`grid/olric\.(\(\*peer\)|\(\*peerPool\)\.(get|remote|dial)$|\(\*prefixConn\)|\(\*channel\)\.(serveConn|serve)$|decodeReply|appendErrorFrame|\(\*outcome\)\.appendFrame)|grid/olric/internal/frame\.`)},
	{"grid", regexp.MustCompile(`bucketgrid/bucketgrid/grid/olric\.|github\.com/bucketgrid/bucketgrid\.`)},
	{"core", regexp.MustCompile(`bucketgrid/bucketgrid/core`)},
	{"policy", regexp.MustCompile(`bucketgrid/bucketgrid/policy`)},
	{"service", regexp.MustCompile(`cmd/bucketgrid/internal/|prometheus|^main\.`)},
	{"grpc", regexp.MustCompile(`google\.golang\.org/(grpc|protobuf|genproto)|golang\.org/x/net/http2|envoyproxy/go-control-plane`)},
	{"membership", regexp.MustCompile(`memberlist|go-msgpack|fillRoutingTable|routingtable`)},
	{"olric", regexp.MustCompile(`olric-data|go-redis|redcon`)},
}

var (
	gcRe      = regexp.MustCompile(`gcBgMarkWorker|bgsweep|bgscavenge|gcStart|markroot|gcDrain`)
	schedRe   = regexp.MustCompile(`runtime\.(schedule|findRunnable|park_m|mstart|goexit0|gopreempt|netpoll|sysmon|stopm|startm|wakep|ready|goready|notewakeup)`)
	sampleRe  = regexp.MustCompile(`^\s+(\d+(?:\.\d+)?)(s|ms|us)\s+(\S+)`)
	frameRe   = regexp.MustCompile(`^\s+(\S+)`)
	syscallRe = regexp.MustCompile(`internal/runtime/syscall|^syscall\.|runtime\.(futex|epollwait|usleep|nanosleep|osyield)`)
)

// grpcParts split the gRPC layer's samples by what the connection does:
// the first that matches any frame of the stack decides; the rest is the
// handling of streams and messages on the handler's side.
var grpcParts = []struct {
	name string
	re   *regexp.Regexp
}{
	{"grpc: protobuf", regexp.MustCompile(`google\.golang\.org/protobuf`)},
	{"grpc: write", regexp.MustCompile(`transport\.\(\*loopyWriter\)|transport\.\(\*bufWriter\)|transport\.\(\*controlBuffer\)`)},
	{"grpc: read", regexp.MustCompile(`transport\.\(\*http2Server\)\.HandleStreams|transport\.\(\*http2Server\)\.operateHeaders|http2\.\(\*Framer\)\.ReadFrame`)},
}

func grpcPart(stack []string) string {
	for _, p := range grpcParts {
		for _, fn := range stack {
			if p.re.MatchString(fn) {
				return p.name
			}
		}
	}
	return "grpc: streams"
}

func classify(stack []string) string {
	for _, fn := range stack {
		for _, l := range layers {
			if l.re.MatchString(fn) {
				return l.name
			}
		}
	}
	s := strings.Join(stack, " ")
	switch {
	case gcRe.MatchString(s):
		return "gc"
	case schedRe.MatchString(s):
		return "scheduler"
	}
	return "runtime-other"
}

func main() {
	cpu := flag.Float64("cpu", 0, "server CPU µs per check of the same run, to print µs per check")
	flag.Parse()
	total, sys := map[string]float64{}, map[string]float64{}
	part, partSys := map[string]float64{}, map[string]float64{} // the gRPC layer's, by grpcParts
	var val float64
	var stack []string
	flush := func() {
		if len(stack) == 0 {
			return
		}
		c := classify(stack)
		total[c] += val
		inSys := false
		for _, fn := range stack {
			if syscallRe.MatchString(fn) {
				sys[c] += val
				inSys = true
				break
			}
		}
		if c == "grpc" {
			p := grpcPart(stack)
			part[p] += val
			if inSys {
				partSys[p] += val
			}
		}
		stack = stack[:0]
	}
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "-----------+") {
			flush()
			continue
		}
		if m := sampleRe.FindStringSubmatch(line); m != nil {
			flush()
			v, _ := strconv.ParseFloat(m[1], 64)
			val = v * map[string]float64{"s": 1000, "ms": 1, "us": 0.001}[m[2]]
			stack = append(stack, m[3])
			continue
		}
		if m := frameRe.FindStringSubmatch(line); m != nil && len(stack) > 0 {
			stack = append(stack, m[1])
		}
	}
	flush()
	if err := sc.Err(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var sum float64
	for _, v := range total {
		sum += v
	}
	if sum == 0 {
		fmt.Fprintln(os.Stderr, "no samples")
		os.Exit(1)
	}
	fmt.Printf("samples: %.0f ms\n", sum)
	names := []string{"grpc", "service", "policy", "grid", "hop", "core", "olric", "membership", "scheduler", "gc", "runtime-other"}
	var sysSum float64
	for _, n := range names {
		sysSum += sys[n]
		line := fmt.Sprintf("%-13s %5.1f %%  (system calls %4.1f %%)", n, 100*total[n]/sum, 100*sys[n]/sum)
		if *cpu > 0 {
			line += fmt.Sprintf("  %5.1f µs = %5.1f µs + %4.1f µs in system calls",
				*cpu*total[n]/sum, *cpu*(total[n]-sys[n])/sum, *cpu*sys[n]/sum)
		}
		fmt.Println(line)
	}
	for _, n := range []string{"grpc: read", "grpc: protobuf", "grpc: streams", "grpc: write"} {
		line := fmt.Sprintf("  %-15s %5.1f %%  (system calls %4.1f %%)", n, 100*part[n]/sum, 100*partSys[n]/sum)
		if *cpu > 0 {
			line += fmt.Sprintf("  %5.1f µs = %5.1f µs + %4.1f µs in system calls",
				*cpu*part[n]/sum, *cpu*(part[n]-partSys[n])/sum, *cpu*partSys[n]/sum)
		}
		fmt.Println(line)
	}
	line := fmt.Sprintf("%-13s %5.1f %%", "system calls", 100*sysSum/sum)
	if *cpu > 0 {
		line += fmt.Sprintf("  %5.1f µs (all layers)", *cpu*sysSum/sum)
	}
	fmt.Println(line)
}
