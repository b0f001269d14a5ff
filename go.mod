module github.com/bucketgrid/bucketgrid

go 1.26.0

require (
	github.com/anishathalye/porcupine v1.3.1
	github.com/sethvargo/go-limiter v0.7.1
	golang.org/x/time v0.16.0
)

require gopkg.in/yaml.v2 v2.4.0
