//go:build wasip1

package proxywasm

import "unsafe"

//go:wasmimport env proxy_log
func proxyLog(level uint32, msg unsafe.Pointer, size uint32) uint32

//go:wasmimport env proxy_get_buffer_bytes
func proxyGetBufferBytes(buffer, start, maxSize uint32, retData, retSize unsafe.Pointer) uint32

//go:wasmimport env proxy_get_header_map_value
func proxyGetHeaderMapValue(mapType uint32, key unsafe.Pointer, keySize uint32, retData, retSize unsafe.Pointer) uint32

//go:wasmimport env proxy_add_header_map_value
func proxyAddHeaderMapValue(mapType uint32, key unsafe.Pointer, keySize uint32, value unsafe.Pointer, valueSize uint32) uint32

//go:wasmimport env proxy_send_local_response
func proxySendLocalResponse(status uint32, details unsafe.Pointer, detailsSize uint32, body unsafe.Pointer, bodySize uint32,
	headers unsafe.Pointer, headersSize uint32, grpcStatus int32) uint32

//go:wasmimport env proxy_get_property
func proxyGetProperty(path unsafe.Pointer, pathSize uint32, retData, retSize unsafe.Pointer) uint32

//go:wasmimport env proxy_get_shared_data
func proxyGetSharedData(key unsafe.Pointer, keySize uint32, retData, retSize, retCas unsafe.Pointer) uint32

//go:wasmimport env proxy_set_shared_data
func proxySetSharedData(key unsafe.Pointer, keySize uint32, value unsafe.Pointer, valueSize uint32, cas uint32) uint32

//go:wasmimport env proxy_define_metric
func proxyDefineMetric(kind uint32, name unsafe.Pointer, nameSize uint32, retID unsafe.Pointer) uint32

//go:wasmimport env proxy_increment_metric
func proxyIncrementMetric(id uint32, delta int64) uint32

//go:wasmimport env proxy_record_metric
func proxyRecordMetric(id uint32, value uint64) uint32

//go:wasmimport env proxy_get_metric
func proxyGetMetric(id uint32, retValue unsafe.Pointer) uint32
