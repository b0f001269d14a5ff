package cas

// cas builds its errors without fmt, whose reflection-driven printer would
// be a tenth of the Envoy filter (wasmfilter links cas). wrap and wrap2 make
// the errors fmt.Errorf makes with one and two %w verbs, as core's do: the
// same text and the same Unwrap (one error, or []error), so errors.Is,
// errors.As and errors.Unwrap see what they saw before.

// wrapError is fmt.Errorf's error for one %w.
type wrapError struct {
	msg string
	err error
}

func (e *wrapError) Error() string { return e.msg }
func (e *wrapError) Unwrap() error { return e.err }

// wrapErrors is fmt.Errorf's error for several %w.
type wrapErrors struct {
	msg  string
	errs []error
}

func (e *wrapErrors) Error() string   { return e.msg }
func (e *wrapErrors) Unwrap() []error { return e.errs }

// wrap returns fmt.Errorf("%w"+detail, err) for a non-nil err.
func wrap(err error, detail string) error {
	return &wrapError{msg: err.Error() + detail, err: err}
}

// wrap2 returns fmt.Errorf("%w"+sep+"%w", a, b) for non-nil a and b.
func wrap2(a error, sep string, b error) error {
	return &wrapErrors{msg: a.Error() + sep + b.Error(), errs: []error{a, b}}
}
