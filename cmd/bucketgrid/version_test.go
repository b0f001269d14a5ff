package main

import (
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

// TestVersionOf: the stamp names a build without VCS information; the
// module version and the commit the go command recorded otherwise.
func TestVersionOf(t *testing.T) {
	vcs := &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "4f2e1d0a9b8c7d6e5f40"}, {Key: "vcs.modified", Value: "true"}}}
	for _, tc := range []struct {
		bi          *debug.BuildInfo
		stamp, want string
	}{
		{&debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "v0.1.0-rc.1", "bucketgrid v0.1.0-rc.1 ("},
		{&debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "", "bucketgrid (devel) ("},
		{&debug.BuildInfo{Main: debug.Module{Version: "v0.1.0"}}, "", "bucketgrid v0.1.0 ("},
		{vcs, "", "bucketgrid (devel) commit 4f2e1d0a9b8c+modified ("},
		{nil, "", "bucketgrid (devel) ("},
	} {
		if got := versionOf(tc.bi, tc.stamp); !strings.HasPrefix(got, tc.want) {
			t.Errorf("versionOf(stamp %q) = %q, want it to start %q", tc.stamp, got, tc.want)
		}
	}
}

// TestVersionStampedWithoutVCS: a build with -buildvcs=false and -ldflags
// -X main.stamped=… says the stamped version (the variable's name is the
// contract of that command line).
func TestVersionStampedWithoutVCS(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the service once more")
	}
	bin := filepath.Join(t.TempDir(), "bucketgrid")
	cmd := exec.Command("go", "build", "-buildvcs=false", "-ldflags", "-X main.stamped=v0.1.0-rc.1", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "-version").CombinedOutput()
	if err != nil {
		t.Fatalf("-version: %v\n%s", err, out)
	}
	if !strings.HasPrefix(string(out), "bucketgrid v0.1.0-rc.1 (") {
		t.Errorf("-version printed %q, want it to start %q", out, "bucketgrid v0.1.0-rc.1 (")
	}
}
