package tck_test

import (
	"testing"

	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/cas/memstore"
	"github.com/bucketgrid/bucketgrid/tck"
)

// The in-memory reference store passes the whole kit.
func TestMemstore(t *testing.T) {
	tck.RunStore(t, func(t *testing.T) cas.Store { return memstore.New() })
}
