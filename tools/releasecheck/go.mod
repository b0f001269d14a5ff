// Module releasecheck proves that the modules of this repository resolve and
// build once tagged, before anything is tagged: see RELEASING.md. It is a
// module of its own (outside the workspace, run with GOWORK=off) so that
// golang.org/x/mod never reaches the library's requirements.
module github.com/bucketgrid/bucketgrid/tools/releasecheck

go 1.26.0

require golang.org/x/mod v0.42.0
