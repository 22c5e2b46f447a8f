// Package memstore is the in-process ratelimit.Store: every key's state in
// this process's memory, decided by the pure algorithms of package
// ratelimit (see Store). It is the store of a single instance, the local
// shares of a stack.Fallback, and the reference the Redis store is checked
// against.
package memstore
