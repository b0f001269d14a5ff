module github.com/bucketgrid/bucketgrid/grid/mongo

go 1.26.0

require github.com/bucketgrid/bucketgrid v0.1.0

require github.com/anishathalye/porcupine v1.3.1 // indirect

require (
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/xdg-go/scram v1.4.0 // indirect
	github.com/xdg-go/stringprep v1.0.4 // indirect
	github.com/youmark/pkcs8 v0.0.0-20240726163527-a2c0da244d78 // indirect
	go.mongodb.org/mongo-driver/v2 v2.10.0
	golang.org/x/crypto v0.54.0 // indirect
	golang.org/x/sync v0.22.0 // indirect
	golang.org/x/text v0.41.0 // indirect
)

// Development inside this repository: the root module (and, for the
// examples, grid/olric) come from this checkout. Replace directives apply
// only to the main module, so a consumer of the published module ignores
// them and resolves the required versions from its proxy; RELEASING.md says
// how the required versions are bumped and tagged.
replace github.com/bucketgrid/bucketgrid => ../..
