// Package layers holds the tests of the repository's shape: that no package
// of the workspace imports one on a floor above its own (TestLayers, with the
// floor of every package in floors, and of a part's internal packages
// inside it in rooms), and how many identifiers each package
// exports (TestExportedNames; go test -v -run TestExportedNames prints the
// table), how many fields and methods the types that compose a package's
// rooms have (TestTypeBudgets: grid/olric's Member), and that a request from each door (the service's ShouldRateLimit,
// httplimit's handler, the filter's request-headers callback) reaches core
// through policy, the Manager and an executor calling back up at most twice
// (TestWalk: it records every call of the request in an instrumented build
// and states the walk's ranks and what a climb is). Nothing imports it.
package layers
