// Package proxywasm is the filter's guest binding for proxy-wasm ABI 0.2.1,
// for the standard Go toolchain (GOOS=wasip1, -buildmode=c-shared). It
// imports the host calls from module "env" with //go:wasmimport, exports
// proxy_abi_version_0_2_1, proxy_on_memory_allocate and the proxy_on_*
// callbacks with //go:wasmexport, and forwards every callback to one
// wasmfilter.VM running on a Host made of those imports.
//
// Importing the package (as cmd/filter does) is all a plugin binary needs.
// On other platforms the package is empty, so native builds, tests and
// go vet of the module work unchanged.
//
// Memory the host writes into (returned header values, shared data,
// configuration) is allocated by proxy_on_memory_allocate from Go slices that
// stay referenced until the host call that asked for them has returned and
// its result has been copied: the garbage collector cannot see pointers held
// by the host.
package proxywasm
