package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// stamped is a version set at build time, for builds that record no VCS
// information (-buildvcs=false, or a source tree without .git such as a
// Docker build context):
//
//	go build -ldflags "-X main.stamped=$(git describe --tags --always --dirty)" ./cmd/bucketgrid
var stamped string

// version describes this build: the version stamped at build time if any,
// else the module version the go command recorded ("(devel)" for a build
// from a checkout; the tag for `go install …@vX.Y.Z`); the commit it was
// built from when the go command recorded one; and the toolchain.
func version() string {
	bi, _ := debug.ReadBuildInfo()
	return versionOf(bi, stamped)
}

// versionOf is version for the build information bi (nil when the binary
// carries none) and the stamp.
func versionOf(bi *debug.BuildInfo, stamp string) string {
	v, rev := "(devel)", ""
	if bi != nil {
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
	if stamp != "" {
		v = stamp
	}
	parts := []string{"bucketgrid", v}
	if rev != "" {
		parts = append(parts, "commit "+rev)
	}
	return fmt.Sprintf("%s (%s %s/%s)", strings.Join(parts, " "), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
