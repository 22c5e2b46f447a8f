// Package lease is the lease layer of the store stack: a Store that admits
// hot token-bucket keys from blocks of units reserved in the store below (a
// Reserver, such as redisstore.RedisStore), so a hot key costs the shared
// store one call per block instead of one per request. Keys opt in with
// ratelimit.Item.Lease, always or by demand (Auto).
package lease
