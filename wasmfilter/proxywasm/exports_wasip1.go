//go:build wasip1

package proxywasm

import "github.com/bucketgrid/bucketgrid/wasmfilter"

// vm is the one VM of this instance; hosts call an instance from one thread.
var vm = wasmfilter.NewVM(host{})

//go:wasmexport proxy_abi_version_0_2_1
func proxyABIVersion() {}

//go:wasmexport proxy_on_context_create
func proxyOnContextCreate(id, parent uint32) { vm.OnContextCreate(id, parent) }

//go:wasmexport proxy_on_vm_start
func proxyOnVMStart(id, size uint32) uint32 { return b2u(vm.OnVMStart(id, int(size))) }

//go:wasmexport proxy_on_configure
func proxyOnConfigure(id, size uint32) uint32 {
	configSize, now = size, 0
	defer func() { configSize = 0 }()
	return b2u(vm.OnConfigure(id, int(size)))
}

//go:wasmexport proxy_on_request_headers
func proxyOnRequestHeaders(id, n, eos uint32) uint32 {
	now = 0 // read the clock afresh for this callback
	return uint32(vm.OnRequestHeaders(id, int(n), eos != 0))
}

//go:wasmexport proxy_on_response_headers
func proxyOnResponseHeaders(id, n, eos uint32) uint32 {
	return uint32(vm.OnResponseHeaders(id, int(n), eos != 0))
}

//go:wasmexport proxy_on_done
func proxyOnDone(id uint32) uint32 { return b2u(vm.OnDone(id)) }

//go:wasmexport proxy_on_delete
func proxyOnDelete(id uint32) { vm.OnDelete(id) }

func b2u(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}
