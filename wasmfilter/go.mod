module github.com/bucketgrid/bucketgrid/wasmfilter

go 1.26

require github.com/bucketgrid/bucketgrid v0.0.0-00010101000000-000000000000

require (
	github.com/tetratelabs/wazero v1.12.0 // indirect
	golang.org/x/sys v0.44.0 // indirect
)

// For development in this repository: build against the sibling root module.
replace github.com/bucketgrid/bucketgrid => ../
