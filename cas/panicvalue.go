package cas

import (
	"runtime"
	"strconv"
)

// valueText is fmt's %v of a panic value for nil, errors, Stringers,
// strings, bools and numbers of predeclared types, without fmt (see
// PanicError.Error). A method that panics is shown as fmt shows it.
func valueText(v any) (text string) {
	method := ""
	defer func() {
		if r := recover(); r != nil && method != "" {
			text = "%!v(PANIC=" + method + " method: " + valueText(r) + ")"
		}
	}()
	switch v := v.(type) {
	case nil:
		return "<nil>"
	case error:
		method = "Error"
		return v.Error()
	case interface{ String() string }:
		method = "String"
		return v.String()
	case string:
		return v
	case bool:
		return strconv.FormatBool(v)
	case int:
		return strconv.FormatInt(int64(v), 10)
	case int8:
		return strconv.FormatInt(int64(v), 10)
	case int16:
		return strconv.FormatInt(int64(v), 10)
	case int32:
		return strconv.FormatInt(int64(v), 10)
	case int64:
		return strconv.FormatInt(v, 10)
	case uint:
		return strconv.FormatUint(uint64(v), 10)
	case uint8:
		return strconv.FormatUint(uint64(v), 10)
	case uint16:
		return strconv.FormatUint(uint64(v), 10)
	case uint32:
		return strconv.FormatUint(uint64(v), 10)
	case uint64:
		return strconv.FormatUint(v, 10)
	case uintptr:
		return strconv.FormatUint(uint64(v), 10)
	case float32:
		return strconv.FormatFloat(float64(v), 'g', -1, 32)
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64)
	case complex64:
		return strconv.FormatComplex(complex128(v), 'g', -1, 64)
	case complex128:
		return strconv.FormatComplex(v, 'g', -1, 128)
	}
	return "(unprintable value; see PanicError.Value)"
}

// stack is runtime/debug.Stack, which would link fmt and os.
func stack() []byte {
	buf := make([]byte, 1024)
	for {
		n := runtime.Stack(buf, false)
		if n < len(buf) {
			return buf[:n]
		}
		buf = make([]byte, 2*len(buf))
	}
}
