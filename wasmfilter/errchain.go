package wasmfilter

// as finds the first error in err's tree (as errors.Unwrap and Unwrap
// []error see it) of type T: errors.As for a concrete type, without the
// reflection errors.As needs, which would link 27 KB of internal/reflectlite
// into the .wasm.
func as[T error](err error) (T, bool) {
	for err != nil {
		if t, ok := err.(T); ok {
			return t, true
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if t, ok := as[T](e); ok {
					return t, true
				}
			}
			return *new(T), false
		default:
			return *new(T), false
		}
	}
	return *new(T), false
}
