package cas

import "github.com/bucketgrid/bucketgrid/internal/errwrap"

// cas builds its errors without fmt, whose printer would be a tenth of the
// Envoy filter (wasmfilter links cas): see package errwrap.

func wrap(err error, detail string) error      { return errwrap.Wrap(err, detail) }
func wrap2(a error, sep string, b error) error { return errwrap.Wrap2(a, sep, b) }
