package olric

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestRollingRestartUnwaited restarts each of three members in turn with
// two replicas, after 50 buckets were drawn to 400 of 1,000 tokens and
// while nobody checks them, the next one shut down as soon as the
// restarted one's Start returned: no wait for a stable routing table nor
// for Replicated, as a Kubernetes StatefulSet's rolling update goes on
// once the restarted pod is ready. Shutdown itself must wait until no
// bucket's only copy is on the member leaving (and say nothing went
// wrong), and no bucket may hold more than 400 tokens after. In one
// process, so that the race pass runs the wait (TestNetRollingRestartReady
// is the same on the test bed).
func TestRollingRestartUnwaited(t *testing.T) {
	ms, cfg, keys := drawnForRestart(t, "rollnow-")
	for i := range ms {
		c := ms[i].cfg
		c.Peers = []string{memberlistAddr(ms[(i+1)%len(ms)].cfg)}
		ctx, cancel := context.WithTimeout(context.Background(), restartShutdownTimeout)
		begin := time.Now()
		err := ms[i].Shutdown(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("member %d's Shutdown took %v", i, time.Since(begin).Round(time.Millisecond))
		m, err := Start(context.Background(), c) // bounded by JoinTimeout
		if err != nil {
			t.Fatal(err)
		}
		ms[i] = m
	}
	waitStable(t, ms)
	assertIdleKept(t, ms, keys, &cfg, restartCapacity-restartSpent)
}

// TestShutdownUnreplicatedIsBounded has a member leave while another
// member cannot answer whether it holds its copies (its resyncer's lock
// held by the test): Shutdown gives up waiting LeaveTimeout + 1 s before
// its context's deadline, leaves all the same, and says so with an error
// matching ErrUnreplicated that names the member that did not answer.
func TestShutdownUnreplicatedIsBounded(t *testing.T) {
	ms := startCluster(t, 3, func(c *Config) { c.ReplicaCount = 2 })
	var leaver *Member
	for attempt := 0; ; attempt++ {
		c := testConfig(t)
		c.ReplicaCount = 2
		c.Peers = []string{memberlistAddr(ms[0].cfg)}
		var err error
		if leaver, err = Start(context.Background(), c); err == nil {
			break
		}
		if attempt == 4 || !strings.Contains(err.Error(), "address already in use") {
			t.Fatal(err)
		}
	}
	all := append(ms[:3:3], leaver)
	waitStable(t, all)
	waitReplicated(t, all)

	mute := &ms[1].exec.resync.mu
	mute.Lock()
	muted := true
	defer func() {
		if muted {
			mute.Unlock()
		}
	}()
	// Two seconds of waiting for copies, then the leave.
	ctx, cancel := context.WithTimeout(context.Background(), leaveReserve(&leaver.cfg)+2*time.Second)
	defer cancel()
	err := leaver.Shutdown(ctx)
	mute.Unlock()
	muted = false
	if !errors.Is(err, ErrUnreplicated) || !strings.Contains(err.Error(), ms[1].Name()) {
		t.Fatalf("Shutdown with %s not answering: %v; want ErrUnreplicated naming it", ms[1].Name(), err)
	}
	t.Logf("Shutdown: %v", err)
	waitStable(t, ms) // it left all the same
}
