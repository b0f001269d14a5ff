package wire

import "github.com/bucketgrid/bucketgrid/internal/errwrap"

// wire builds its errors without fmt, whose printer would be a tenth of the
// Envoy filter: see package errwrap.

func wrap(err error, detail string) error      { return errwrap.Wrap(err, detail) }
func wrap2(a error, sep string, b error) error { return errwrap.Wrap2(a, sep, b) }
func errText(err error) string                 { return errwrap.Text(err) }
