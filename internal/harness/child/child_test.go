package child

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestOutputAndExit: both streams reach Out, and Err says how it ended.
func TestOutputAndExit(t *testing.T) {
	p := Start(t, exec.Command("sh", "-c", "echo out; echo err >&2; exit 3"))
	var exit *exec.ExitError
	if err := p.Err(); !errors.As(err, &exit) || exit.ExitCode() != 3 {
		t.Fatalf("Err() = %v, want exit status 3", err)
	}
	if out := p.Out.String(); !strings.Contains(out, "out\n") || !strings.Contains(out, "err\n") {
		t.Fatalf("Out = %q, want both streams", out)
	}
	if !p.Stop(time.Second) {
		t.Fatal("Stop of an ended process reported it still ran")
	}
}

// TestStopKillsWhatIgnoresTheSignal: a process that ends on SIGTERM stops;
// one that ignores it is killed once the grace has passed.
func TestStopKillsWhatIgnoresTheSignal(t *testing.T) {
	for _, c := range []struct {
		script string
		stops  bool
	}{
		{`echo ready; exec sleep 60`, true},
		{`trap "" TERM; echo ready; while :; do sleep 1; done`, false},
	} {
		p := Start(t, exec.Command("sh", "-c", c.script))
		deadline := time.Now().Add(time.Minute)
		for !strings.Contains(p.Out.String(), "ready") { // the trap is set
			if time.Now().After(deadline) {
				t.Fatalf("%q never got ready", c.script)
			}
			time.Sleep(5 * time.Millisecond)
		}
		grace := time.Minute
		if !c.stops {
			grace = 200 * time.Millisecond
		}
		if got := p.Stop(grace); got != c.stops {
			t.Fatalf("%q: Stop = %v, want %v", c.script, got, c.stops)
		}
		select {
		case <-p.Exited():
		default:
			t.Fatalf("%q still runs after Stop", c.script)
		}
	}
}
