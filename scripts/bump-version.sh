#!/usr/bin/env bash
# bump-version.sh vX.Y.Z — make every module of this repository require the
# others at vX.Y.Z, the version about to be released, and keep go.work's
# versioned replaces (which resolve cmd/bucketgrid's requirements to the work
# tree) in step. See RELEASING.md. It edits go.mod and go.work files only.
set -euo pipefail
v=${1:?usage: bump-version.sh vX.Y.Z}
case $v in
v[0-9]*.[0-9]*.[0-9]*) ;;
*)
	echo "bump-version.sh: $v is not a vX.Y.Z version" >&2
	exit 2
	;;
esac
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
base=github.com/bucketgrid/bucketgrid

# Every published module (not tools/ or bench/) requires the repository's
# modules it already requires at v.
for mod in $(git ls-files -- '*/go.mod' | grep -v -E '^(tools|bench)/'); do
	dir=$(dirname "$mod")
	for dep in $(sed -n -E "s#^[[:space:]]*(require[[:space:]]+)?($base(/[^[:space:]]*)?)[[:space:]]+v[^[:space:]]+.*#\2#p" "$mod" | sort -u); do
		[ "$dep" = "$base/$dir" ] && continue
		(cd "$dir" && go mod edit -require="$dep@$v")
	done
done

# go.work's versioned replaces follow (sed keeps its comments).
sed -i -E "s#^([[:space:]]*(replace[[:space:]]+)?$base/[^[:space:]]+) v[^[:space:]]+ => #\1 $v => #" go.work
echo "bump-version.sh: every module requires the others at $v; review with git diff"
