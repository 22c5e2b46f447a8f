package config

import (
	"fmt"
	"reflect"
)

// QuotaReads bounds the store reads that no policy counts: GET
// server.quota_path (docs/reference/http-api.md#the-quota-endpoint), the only store read
// the gateway makes outside a decision. Each read is one store call of
// up to MaxItems keys, which consumes nothing, so without a bound
// callers that are each new (every anonymous IPv6 /64 is a caller of its
// own) could make Redis do unbounded work for free.
//
// The bounds are per gateway process, all callers together; a fleet of n
// instances reads at most n times as much. Per instance, the store work
// of reads is at most Burst × MaxItems keys at once and Rate × MaxItems
// keys a second (with the defaults 4,000 and 2,000; a key read costs
// Redis some 12 µs, so about 25 ms of Redis time a second). A read past
// the budget is 429 with Retry-After and makes no store call.
//
// Each field is a whole number; 0 is not allowed (there is no
// "unlimited"), and Load names the field (server.quota_reads.rate, ...)
// when one is out of range. Absent keys keep their defaults.
type QuotaReads struct {
	// Rate is the reads a second that reach the store, refilled
	// continuously (default 20; 1 to 10,000).
	Rate int `mapstructure:"rate"`
	// Burst is the reads that may reach the store at once, before Rate
	// applies (default 40; 1 to 10,000).
	Burst int `mapstructure:"burst"`
	// MaxItems is the most store keys (one per policy of scope tenant or
	// global, one per route for tenant_route and route) one read reads
	// (default 100; 1 to 1,000). A caller limited by more keys gets the
	// first MaxItems, those of scope tenant and global first, and
	// "truncated": true. 1,000 keys are about 12 ms of Redis in one
	// script call, during which every decision waits: keep MaxItems well
	// below store.redis.timeout / 12 µs.
	MaxItems int `mapstructure:"max_items"`
}

// Defaults and bounds of server.quota_reads.
const (
	DefaultQuotaReadRate     = 20
	DefaultQuotaReadBurst    = 40
	DefaultQuotaReadMaxItems = 100
	MaxQuotaReadRate         = 10_000
	MaxQuotaReadBurst        = 10_000
	MaxQuotaReadItems        = 1_000
)

func (q *QuotaReads) setDefaults() {
	setZero(&q.Rate, DefaultQuotaReadRate)
	setZero(&q.Burst, DefaultQuotaReadBurst)
	setZero(&q.MaxItems, DefaultQuotaReadMaxItems)
}

// Reads returns server.quota_reads with every default filled: the
// defaults when the section is absent (QuotaReads is nil), else the
// decoded section, whose absent keys got their defaults.
func (s *Server) Reads() QuotaReads {
	if s.QuotaReads == nil {
		var q QuotaReads
		q.setDefaults()
		return q
	}
	return *s.QuotaReads
}

// quotaReadBounds are the inclusive ranges of QuotaReads' keys.
var quotaReadBounds = map[string][2]int{
	"rate":      {1, MaxQuotaReadRate},
	"burst":     {1, MaxQuotaReadBurst},
	"max_items": {1, MaxQuotaReadItems},
}

// decodeKey decodes one key of server.quota_reads and checks its range
// there, so that the problem names the key's path and, for a value from
// the environment, its variable. Unknown keys go on to the decoder, which
// reports them.
func (q *QuotaReads) decodeKey(d *decoder, path, key string, in any) bool {
	bounds, ok := quotaReadBounds[key]
	if !ok {
		return false
	}
	field := map[string]*int{"rate": &q.Rate, "burst": &q.Burst, "max_items": &q.MaxItems}[key]
	v := *field
	d.decode(path, in, reflect.ValueOf(&v).Elem())
	if v < bounds[0] || v > bounds[1] {
		d.fail(path, fmt.Sprintf("must be a whole number from %d to %d, got %d", bounds[0], bounds[1], v))
		return true
	}
	*field = v
	return true
}
