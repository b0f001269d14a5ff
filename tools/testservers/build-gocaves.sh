#!/usr/bin/env bash
# build-gocaves.sh OUT — build the gocaves mock Couchbase cluster from the Go
# module proxy into the binary OUT.
#
# Only github.com/couchbaselabs/gocaves v0.0.1-75 is served, and `go install`
# of it fails (its go.mod has a replace directive). Its module zip carries no
# LICENSE, so its source is never copied into this repository: it is built at
# test time from a scratch copy of the module cache, patched as follows:
#   - drop the replace/require of github.com/couchbaselabs/gocaves/client and
#     delete example/ (the only user of that client module);
#   - run tools/prebuildstep.go, which regenerates the mock/data and
#     checksuite packages the zip lacks;
#   - delete the per-packet log.Printf lines of mock/mockimpl/cluster.go
#     (≈500 bytes of log for every KV operation).
# Honours GOCACHE (use a private one: a shared cache trimmed mid-build breaks
# the build) and GOMODCACHE.
set -euo pipefail

out=${1:?usage: build-gocaves.sh OUT}
case $out in /*) ;; *) out=$PWD/$out ;; esac
version=v0.0.1-75

export GOWORK=off GOFLAGS=-mod=mod
# A fixed scratch path next to OUT keeps Go's build cache effective across
# rebuilds (compile actions are keyed on the source directory too); callers
# building into one folder at once must take turns (servers.sh holds a lock
# on its cache while it builds).
work=$(dirname "$out")/.gocaves-build
chmod -R u+w "$work" 2>/dev/null || true
rm -rf "$work"
mkdir -p "$work"
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT

# go mod download needs no module; run it from the scratch dir.
dir=$(cd "$work" && go mod download -json "github.com/couchbaselabs/gocaves@$version" |
	sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
if [ -z "$dir" ] || [ ! -f "$dir/go.mod" ]; then
	echo "build-gocaves: could not download gocaves $version" >&2
	exit 1
fi

cp -R "$dir" "$work/src"
chmod -R u+w "$work/src"
cd "$work/src"
go mod edit -dropreplace=github.com/couchbaselabs/gocaves/client \
	-droprequire=github.com/couchbaselabs/gocaves/client
rm -rf example
go run ./tools/prebuildstep.go >/dev/null
sed -i -E '/^[[:space:]]*log\.Printf\("(received|sending|throwing away) (kv packet|mgmt request|view request|query request|search request|analytics request)/d' \
	mock/mockimpl/cluster.go
go mod tidy >/dev/null 2>&1 || true
go build -o "$out.tmp.$$" .
mv "$out.tmp.$$" "$out"
