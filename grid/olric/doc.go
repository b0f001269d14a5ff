// Package olric embeds an Olric member in the application process and runs
// bucketgrid requests on the owner of each bucket, in one hop.
package olric
