module github.com/bucketgrid/bucketgrid/grid/couchbase

go 1.26.0

require (
	github.com/bucketgrid/bucketgrid v0.1.0
	github.com/couchbase/gocb/v2 v2.11.1
)

require (
	github.com/anishathalye/porcupine v1.3.1 // indirect
	github.com/couchbase/gocbcore/v10 v10.8.1 // indirect
	github.com/couchbase/gocbcoreps v0.1.4 // indirect
	github.com/couchbase/goprotostellar v1.0.2 // indirect
	github.com/couchbaselabs/gocbconnstr/v2 v2.0.0 // indirect
	github.com/go-logr/logr v1.4.3 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	github.com/golang/snappy v1.0.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/gorilla/websocket v1.5.3 // indirect
	github.com/grpc-ecosystem/go-grpc-middleware v1.4.0 // indirect
	go.opentelemetry.io/auto/sdk v1.1.0 // indirect
	go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc v0.62.0 // indirect
	go.opentelemetry.io/otel v1.37.0 // indirect
	go.opentelemetry.io/otel/metric v1.37.0 // indirect
	go.opentelemetry.io/otel/trace v1.37.0 // indirect
	go.uber.org/multierr v1.11.0 // indirect
	go.uber.org/zap v1.27.0 // indirect
	golang.org/x/net v0.43.0 // indirect
	golang.org/x/sys v0.35.0 // indirect
	golang.org/x/text v0.28.0 // indirect
	google.golang.org/genproto v0.0.0-20250811230008-5f3141c8851a // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20250811230008-5f3141c8851a // indirect
	google.golang.org/grpc v1.74.2 // indirect
	google.golang.org/protobuf v1.36.7 // indirect
)

// google.golang.org/genproto must stay required at 2025-08 or later even
// though no package of it is imported: the 2020 version that
// go-grpc-middleware pulls in otherwise makes googleapis/rpc an ambiguous
// import. `go mod tidy` drops it; add it back with
// go get google.golang.org/genproto@v0.0.0-20250811230008-5f3141c8851a

// Development inside this repository: the root module (and, for the
// examples, grid/olric) come from this checkout. Replace directives apply
// only to the main module, so a consumer of the published module ignores
// them and resolves the required versions from its proxy; RELEASING.md says
// how the required versions are bumped and tagged.
replace github.com/bucketgrid/bucketgrid => ../..
