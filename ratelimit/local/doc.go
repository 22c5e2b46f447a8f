// Package local is the coarse per-instance stage (stage 1) in front of the
// store: a bounded Set of golang.org/x/time/rate token buckets, one per
// caller, all with the same limit, whose state is this instance's alone. It
// never reads the clock: every call is given its time.
package local
