// Package layers holds the tests of the repository's shape: that no package
// of the workspace imports one on a floor above its own (TestLayers, with the
// floor of every package in floors, and of a part's internal packages
// inside it in rooms), and how many identifiers each package
// exports (TestExportedNames; go test -v -run TestExportedNames prints the
// table). Nothing imports it.
package layers
