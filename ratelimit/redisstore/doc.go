// Package redisstore is the fleet-wide decision store of package ratelimit:
// the algorithms run as Lua scripts (embedded from lua/) in Redis, so that
// every instance of a fleet decides on the same state. It holds the only
// Redis client of the module; a program that decides in memory alone does
// not link it.
//
// TLSFiles (redis_tls.go) names the files of a TLS connection to Redis.
//
// Open builds the whole stack on Redis (standalone, Cluster or Sentinel):
// RedisStore with coalesced pipelines, lease.Store,
// stack.Breaker and stack.Fallback, as one stack.Stack.
package redisstore
