package mongo_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/grid/mongo"
	"github.com/bucketgrid/bucketgrid/internal/harness/storetest"
	"github.com/bucketgrid/bucketgrid/tck"
)

// ferretServer is a private FerretDB process.
type ferretServer struct {
	cmd    *exec.Cmd
	exited chan struct{}
	uri    string
}

// startFerret runs FERRETDB_BIN on addr (port 0: any) with its data in dir
// and waits until it accepts connections. The process is killed at cleanup.
func startFerret(t *testing.T, bin, addr, dir string) *ferretServer {
	t.Helper()
	uriFile := filepath.Join(t.TempDir(), "uri")
	cmd := exec.Command(bin, "--listen-addr="+addr, "--data-dir="+dir, "--uri-file="+uriFile, "--log-level=error")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	f := &ferretServer{cmd: cmd, exited: exited}
	t.Cleanup(func() { f.kill() })
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		select {
		case <-exited:
			t.Fatalf("%s exited at start", bin)
		default:
		}
		if b, err := os.ReadFile(uriFile); err == nil && len(b) > 0 {
			f.uri = strings.TrimSpace(string(b))
			return f
		}
	}
	t.Fatalf("%s not ready after 20 s", bin)
	return nil
}

func (f *ferretServer) kill() {
	_ = f.cmd.Process.Signal(syscall.SIGCONT)
	_ = f.cmd.Process.Kill()
	<-f.exited
}

// TestOutage kills FerretDB under a running increment loop and restarts it
// on the same address and data, then freezes it (SIGSTOP) and thaws it:
// while it is down or hung every call fails with an error (never a lost
// race) within its context's timeout; afterwards calls succeed again and the
// stored value is intact.
func TestOutage(t *testing.T) {
	bin := storetest.Server(t, "FERRETDB_BIN", "the outage test starts its own FerretDB", startHint)
	dir := t.TempDir()
	srv := startFerret(t, bin, "127.0.0.1:0", dir)
	addr := strings.TrimSuffix(strings.TrimPrefix(srv.uri, "mongodb://"), "/")
	if i := strings.IndexAny(addr, "/?"); i >= 0 {
		addr = addr[:i]
	}
	c := connect(t, srv.uri, 1)
	s, err := mongo.New(c.Database("outage").Collection("buckets"))
	if err != nil {
		t.Fatal(err)
	}

	const opTimeout = 300 * time.Millisecond
	w := tck.StartOutageLoad(s, "k", opTimeout)
	defer w.Stop()

	w.WaitFor(t, func(r tck.OutageResult) bool { return r.OK >= 20 }, "20 increments before the outage")
	srv.kill()
	w.WaitFor(t, func(r tck.OutageResult) bool { return r.Errors >= 5 }, "5 failures during the outage")
	srv = startFerret(t, bin, addr, dir)
	before := w.Result().OK
	w.WaitFor(t, func(r tck.OutageResult) bool { return r.OK >= before+20 }, "20 increments after the restart")

	// A hung server (stopped, its sockets open) must not hang the caller.
	if err := srv.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.cmd.Process.Signal(syscall.SIGCONT) })
	errs := w.Result().Errors
	w.WaitFor(t, func(r tck.OutageResult) bool { return r.Errors >= errs+5 }, "5 failures while the server hangs")
	if err := srv.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	before = w.Result().OK
	w.WaitFor(t, func(r tck.OutageResult) bool { return r.OK >= before+20 }, "20 increments after the server recovered")
	r := w.Stop()

	tck.CheckOutage(t, s, "k", r, opTimeout)
}
