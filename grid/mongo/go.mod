module github.com/bucketgrid/bucketgrid/grid/mongo

go 1.26.0

require github.com/bucketgrid/bucketgrid v0.0.0-00010101000000-000000000000

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

// The replace is for development inside this repository; consumers resolve
// the published module.
replace github.com/bucketgrid/bucketgrid => ../..
