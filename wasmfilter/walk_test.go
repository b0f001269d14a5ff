package wasmfilter

import (
	"os"
	"testing"

	"github.com/bucketgrid/bucketgrid/wasmfilter/internal/shareddata"
)

// TestWalkProbe runs one request through the filter natively on the fake
// host, from its request-headers callback, the bucket absent.
// internal/layers' TestWalk runs it with every function of the workspace
// instrumented and judges the path it records. (In wazero the filter's
// frames are not Go frames; natively it is the same Go code.)
func TestWalkProbe(t *testing.T) {
	vm := newFakeVM(t, shareddata.New(), newClock(), basicConfig)
	res := walkRequest(vm, "192.0.2.1:40000", map[string]string{":path": "/api/v1", ":method": "GET"})
	if res.status != 200 {
		t.Fatalf("first request answered %d %s, want 200", res.status, res.details)
	}
}

// walkRequest is the request internal/layers' TestWalk records: with
// BUCKETGRID_WALK_OUT set, the instrumented functions append their stacks
// to that file while it runs.
func walkRequest(vm *fakeVM, source string, headers map[string]string) result {
	if out := os.Getenv("BUCKETGRID_WALK_OUT"); out != "" {
		os.Setenv("BUCKETGRID_WALK_FILE", out)
		defer os.Unsetenv("BUCKETGRID_WALK_FILE")
	}
	return vm.do(source, headers)
}
