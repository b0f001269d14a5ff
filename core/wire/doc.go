// Package wire is the protocol between bucketgrid's buckets and the places
// they are stored: the distributed command set (Request, Op, Mode), its
// answers (Response, Result, Status), Process — the pure function every
// executor runs on stored bytes — and the compact, versioned binary codec of
// configurations, states, requests and responses.
//
// Users of the root package never need it; a backend author implementing an
// executor, or a store that interprets nothing and keeps bytes, does.
//
// Process applies a Request to the bytes stored for a key at a time in
// nanoseconds of the executing side's clock: a CAS loop runs it between a
// read and a conditional write, a grid owner under a per-key lock, the
// proxy-wasm filter on shared data. It performs no I/O and reads no clock.
//
// Every record starts with FormatVersion, followed by a tag byte naming the
// record; a reader rejects unknown versions and malformed bytes with a
// *DecodeError (ErrUnknownVersion, ErrCorrupt), never a panic. Golden byte
// vectors in testdata pin the format, so that a change of it cannot be
// silent.
package wire
