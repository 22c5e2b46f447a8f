package redisstore

import "time"

// ReprobeEvery is reprobeEvery, for the tests of package redisstore_test.
const ReprobeEvery = reprobeEvery

// SetModeClock makes now the clock of s's fallback to EVALSHA and of its
// tries of FCALL after it (see runner.useFunction).
func SetModeClock(s *RedisStore, now func() time.Time) { s.run.now = now }

// FellBack reports whether s sends its calls as EVALSHA (to its one
// server; not for a Cluster).
func FellBack(s *RedisStore) bool { return s.run.one.evalshaSince.Load() != 0 }

// WithBreakerClock returns c with now as the clock of the circuit
// breaker's cooldown that Open builds.
func WithBreakerClock(c Config, now func() time.Time) Config {
	c.breakerNow = now
	return c
}
