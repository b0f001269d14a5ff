package couchbase_test

import (
	"bufio"
	"os"
	"os/exec"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/grid/couchbase"
	"github.com/bucketgrid/bucketgrid/tck"
)

// startCaves runs a private gocaves mock cluster from GOCAVES_BIN and returns
// its process and connection string. The process is killed at cleanup.
func startCaves(t *testing.T, bin string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(bin, "--mock-only")
	cmd.Dir = t.TempDir()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	found := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`"connstr":"([^"]+)"`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
				break
			}
		}
		for sc.Scan() { // keep draining so gocaves never blocks on its log
		}
	}()
	select {
	case connstr := <-found:
		return cmd, connstr
	case <-time.After(20 * time.Second):
		t.Fatalf("%s printed no connstr within 20 s", bin)
		return nil, ""
	}
}

// TestOutage runs an increment loop against a private gocaves while the
// server first hangs (SIGSTOP) and recovers (SIGCONT), then dies: while it
// is unavailable every call fails with an error (never a lost race) within
// its context's timeout; after it recovers calls succeed again and the
// stored value is intact. gocaves keeps data in memory and picks new ports
// on every start, so a hang, not a restart, is the recoverable outage here.
func TestOutage(t *testing.T) {
	bin := os.Getenv("GOCAVES_BIN")
	if bin == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("GOCAVES_BIN is not set and CI is: the outage test starts its own gocaves; " + startHint)
		}
		t.Skip("GOCAVES_BIN is not set; " + startHint)
	}
	proc, connstr := startCaves(t, bin)
	coll := connect(t, server{connstr: connstr, user: "Administrator", password: "password", bucket: "default"})
	s, err := couchbase.New(coll)
	if err != nil {
		t.Fatal(err)
	}

	const opTimeout = 300 * time.Millisecond
	w := tck.StartOutageLoad(s, "k", opTimeout)
	defer w.Stop()

	w.WaitFor(t, func(r tck.OutageResult) bool { return r.OK >= 20 }, "20 increments before the outage")
	if err := proc.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	w.WaitFor(t, func(r tck.OutageResult) bool { return r.Errors >= 5 }, "5 failures while the server hangs")
	if err := proc.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	before := w.Result().OK
	w.WaitFor(t, func(r tck.OutageResult) bool { return r.OK >= before+20 }, "20 increments after the server recovered")
	r := w.Stop()
	tck.CheckOutage(t, s, "k", r, opTimeout)

	// Dead for good: still errors, never lost races, within the timeout.
	_ = proc.Process.Kill()
	_ = proc.Wait()
	w = tck.StartOutageLoad(s, "k", opTimeout)
	w.WaitFor(t, func(r tck.OutageResult) bool { return r.Errors >= 5 }, "5 failures after the server died")
	r = w.Stop()
	t.Logf("server dead: ok=%d lost=%d errors=%d, slowest failure %v, last error: %v",
		r.OK, r.Lost, r.Errors, r.SlowestErr.Round(time.Millisecond), r.LastErr)
	if r.Lost != 0 || r.OK != 0 {
		t.Errorf("dead server: %d lost races and %d successes reported", r.Lost, r.OK)
	}
	if r.SlowestErr > opTimeout+2*time.Second {
		t.Errorf("a failing call took %v, beyond its %v timeout", r.SlowestErr, opTimeout)
	}
}
