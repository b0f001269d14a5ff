// Package errwrap makes the errors fmt.Errorf makes with %w, without fmt.
//
// core and cas build their errors with it: fmt's reflection-driven printer
// would be a tenth of the Envoy filter (wasmfilter links both). The errors
// have the same text and the same Unwrap (one error, or []error) as
// fmt.Errorf's, so errors.Is, errors.As and errors.Unwrap see what they would
// see; core's and cas's TestErrorMessages pin every message. It imports
// nothing, so core may depend on it and stay a leaf of this module.
package errwrap

// single is fmt.Errorf's error for one %w.
type single struct {
	msg string
	err error
}

func (e *single) Error() string { return e.msg }
func (e *single) Unwrap() error { return e.err }

// pair is fmt.Errorf's error for two %w.
type pair struct {
	msg  string
	errs []error
}

func (e *pair) Error() string   { return e.msg }
func (e *pair) Unwrap() []error { return e.errs }

// Wrap returns fmt.Errorf("%w"+detail, err) for a non-nil err.
func Wrap(err error, detail string) error {
	return &single{msg: err.Error() + detail, err: err}
}

// Wrap2 returns fmt.Errorf("%w"+sep+"%w", a, b) for non-nil a and b.
func Wrap2(a error, sep string, b error) error {
	return &pair{msg: a.Error() + sep + b.Error(), errs: []error{a, b}}
}

// Text is what fmt's %v prints for err: its message, or "<nil>".
func Text(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}
