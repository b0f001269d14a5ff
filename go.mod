module github.com/bucketgrid/bucketgrid

go 1.26
