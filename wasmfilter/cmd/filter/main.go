// Command filter is the bucketgrid rate limiter as an Envoy proxy-wasm HTTP
// filter. Build it with scripts/build-wasm.sh, which runs
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -ldflags='-s -w' \
//	    -o wasmfilter/filter.wasm ./wasmfilter/cmd/filter
//
// The binary is a WASI reactor: the host calls _initialize, then the
// proxy_on_* exports of package proxywasm. main is never called.
package main

import _ "github.com/bucketgrid/bucketgrid/wasmfilter/proxywasm"

func main() {}
