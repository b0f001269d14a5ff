package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// version describes this build: the module version the go command
// recorded ("(devel)" for a build from a checkout; the tag for `go install
// …@vX.Y.Z`), the commit it was built from when known, and the toolchain.
func version() string {
	v, rev := "(devel)", ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			v = bi.Main.Version
		}
		var modified bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if rev != "" && modified {
			rev += "+modified"
		}
	}
	parts := []string{"bucketgrid", v}
	if rev != "" {
		parts = append(parts, "commit "+rev)
	}
	return fmt.Sprintf("%s (%s %s/%s)", strings.Join(parts, " "), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
