package core

import "github.com/bucketgrid/bucketgrid/internal/errwrap"

// core builds its errors without fmt, whose printer would be a tenth of the
// Envoy filter: see package errwrap.

func wrap(err error, detail string) error { return errwrap.Wrap(err, detail) }
func errText(err error) string            { return errwrap.Text(err) }
