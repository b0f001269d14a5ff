#!/usr/bin/env bash
# build-wasm.sh — build the Envoy proxy-wasm filter: wasmfilter/filter.wasm.
#
#   GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -ldflags='-s -w' \
#       -o wasmfilter/filter.wasm ./wasmfilter/cmd/filter
#
# c-shared makes a WASI reactor exporting _initialize, which Envoy (≥ 1.33)
# calls before any proxy_on_* callback. The wazero tests in wasmfilter load the
# file this writes; run this script before `go test` (CI does).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root/wasmfilter"
GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -ldflags='-s -w' \
	-o filter.wasm ./cmd/filter
echo "wasmfilter/filter.wasm: $(wc -c <filter.wasm) bytes"
