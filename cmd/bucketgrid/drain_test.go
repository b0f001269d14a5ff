package main

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// TestDrainGrace: at shutdown the health checks fail (gRPC NOT_SERVING,
// /healthcheck 500) while the listeners still accept and rate-limit
// requests are still answered, for -drain-grace; then the instance stops.
// When the machine is too slow to look inside the window, it tries again
// with a longer one.
func TestDrainGrace(t *testing.T) {
	var err error
	for _, grace := range []time.Duration{2 * time.Second, 6 * time.Second, 20 * time.Second} {
		if err = drainOnce(t, grace); err == nil {
			return
		}
		t.Logf("-drain-grace %v: %v; trying a longer one", grace, err)
	}
	t.Fatal(err)
}

func drainOnce(t *testing.T, grace time.Duration) error {
	in, _ := memoryInstance(t, "-drain-grace", grace.String())
	conn, err := grpc.NewClient(in.grpcAddr, grpc.WithTransportCredentials(insecureCreds()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	health := healthpb.NewHealthClient(conn)
	rls := client(t, in.grpcAddr)
	if r, err := health.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health before the shutdown: %v %v", r, err)
	}

	in.cancel() // what SIGTERM does
	for {
		r, err := health.Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			return fmt.Errorf("health check after the shutdown began: %w (listener closed before NOT_SERVING was seen)", err)
		}
		if r.Status == healthpb.HealthCheckResponse_NOT_SERVING {
			break
		}
		time.Sleep(10 * time.Millisecond) // polling the status, not waiting for it
	}
	if _, err := call(rls, req("srv", "k", "x")); err != nil {
		return fmt.Errorf("a rate-limit request while health checks fail: %w", err)
	}
	resp, err := http.Get("http://" + in.httpAddr + "/healthcheck")
	if err != nil {
		return fmt.Errorf("/healthcheck while draining: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusInternalServerError {
		t.Fatalf("/healthcheck while draining: %d, want 500", resp.StatusCode)
	}
	select {
	case err := <-in.done:
		in.done <- err // for the test's cleanup
		return fmt.Errorf("run returned (%v) before the checks above ended", err)
	default:
	}
	select {
	case err := <-in.done:
		in.done <- err
	case <-time.After(grace + 30*time.Second):
		t.Fatalf("run did not return within %v of the shutdown", grace+30*time.Second)
	}
	if _, err := call(rls, req("srv", "k", "y")); err == nil {
		t.Fatal("a rate-limit request answered after the drain and the shutdown")
	}
	return nil
}

// TestVersion: -version prints the version and exits, without -config.
func TestVersion(t *testing.T) {
	out, err := exec.Command(binary(t), "-version").CombinedOutput()
	if err != nil {
		t.Fatalf("-version: %v\n%s", err, out)
	}
	if s := string(out); !strings.HasPrefix(s, "bucketgrid ") || !strings.Contains(s, "go1.") || strings.Count(s, "\n") != 1 {
		t.Fatalf("-version printed %q, want one line: bucketgrid, its version and the toolchain", s)
	}
}
