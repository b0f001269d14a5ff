#!/usr/bin/env bash
# build-wasm.sh — build the Envoy proxy-wasm filter: wasmfilter/filter.wasm.
#
#   GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -ldflags='-s -w' \
#       -o wasmfilter/filter.wasm ./wasmfilter/cmd/filter
#
# c-shared makes a WASI reactor exporting _initialize, which Envoy (≥ 1.33)
# calls before any proxy_on_* callback. The wazero tests in wasmfilter load the
# file this writes; run this script before `go test` (CI does).
#
# With --sizes it also says where the bytes go: it builds a copy that keeps
# wasm's name section (no -s) and prints the sections and the code size of
# each Go package (wasmfilter/cmd/wasmsize; `go tool nm` cannot read wasm).
# The size goal is 3,000,000 bytes with 100 KB of margin: TestWasmImportsWithinEnvoy
# holds it to 2,900,000.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root/wasmfilter"
GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -ldflags='-s -w' \
	-o filter.wasm ./cmd/filter
echo "wasmfilter/filter.wasm: $(wc -c <filter.wasm) bytes"
if [ "${1:-}" = --sizes ]; then
	sym=$(mktemp --suffix=.wasm)
	trap 'rm -f "$sym"' EXIT
	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -o "$sym" ./cmd/filter
	echo "with the name section:"
	go run ./cmd/wasmsize "$sym"
fi
