module github.com/bucketgrid/bucketgrid/grid/mongo

go 1.26

require github.com/bucketgrid/bucketgrid v0.0.0-00010101000000-000000000000

require go.mongodb.org/mongo-driver/v2 v2.10.0 // indirect

// The replace is for development inside this repository; consumers resolve
// the published module.
replace github.com/bucketgrid/bucketgrid => ../..
