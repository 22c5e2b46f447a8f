// Package redisstore is the fleet-wide decision store of package ratelimit:
// the algorithms run as Lua scripts (embedded from lua/) in Redis, so that
// every instance of a fleet decides on the same state. It holds the only
// Redis client of the module; a program that decides in memory alone does
// not link it.
//
// Open builds the whole stack on Redis (standalone, Cluster or Sentinel):
// RedisStore with coalesced pipelines, ratelimit.LeaseStore,
// ratelimit.Breaker and ratelimit.Fallback, as one ratelimit.Stack.
package redisstore
