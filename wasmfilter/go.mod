module github.com/bucketgrid/bucketgrid/wasmfilter

go 1.26.0

require (
	github.com/bucketgrid/bucketgrid v0.0.0-00010101000000-000000000000
	github.com/tetratelabs/wazero v1.12.0
)

require (
	github.com/anishathalye/porcupine v1.3.1 // indirect
	golang.org/x/sys v0.48.0 // indirect
)

// For development in this repository: build against the sibling root module.
replace github.com/bucketgrid/bucketgrid => ../
