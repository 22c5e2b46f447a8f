package redisstore

import (
	"context"
	"crypto/tls"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/lease"
	"github.com/quotagate/quotagate/ratelimit/stack"
)

// Config describes a Redis decision backend: a standalone server, a Cluster
// or a primary followed through Sentinels, by the shape of Addrs and
// MasterName (see RedisClientOptions).
type Config struct {
	Addrs              []string
	MasterName         string
	Username, Password string
	// TLS, when not nil, makes every connection use TLS with it (see
	// TLSFiles); nil is plain TCP.
	TLS *tls.Config
	// PoolSize is the number of connections per node; 0 means 10 per CPU.
	PoolSize int
	// Timeout is the deadline of one decision, socket reads and writes
	// included; it must be > 0. Connecting is allowed max(Timeout, 250ms).
	Timeout time.Duration
	// BreakerFailures consecutive failures open the circuit breaker, which
	// lets a probe through after BreakerCooldown (see stack.Breaker).
	BreakerFailures int
	BreakerCooldown time.Duration
	// Now is the clock of the stack's local shares (on_store_error local);
	// nil = time.Now. Redis decides on its own clock.
	Now func() time.Time
	// FleetSize is the least number of instances assumed to share Redis
	// (0 or less means 1): the fleet's size is the larger of it and the
	// live count of the roster, and sizes the local shares (see
	// stack.FallbackOptions) and lease blocks. With FleetStatic it is
	// the size, exactly.
	FleetSize int
	// Hook, when not nil, is added to the client and sees every command
	// and pipeline the store sends (a benchmark counts calls with it).
	Hook redis.Hook
	// FleetStatic turns registration off: the instance joins no roster
	// and the fleet's size is FleetSize.
	FleetStatic bool
	// FleetTTL is how long an instance's registration in the roster lasts
	// without a heartbeat (one every FleetTTL/3); 0 means
	// stack.DefaultFleetTTL.
	FleetTTL time.Duration
	// FleetID names the instance in the roster; "" means a new id (see
	// stack.NewInstanceID). Stores of one process should share one:
	// they are one instance. Closing any of them leaves the roster until
	// another one's next heartbeat.
	FleetID string
	// KeyPrefix starts the roster's key (see RosterKey); "" means "qg".
	KeyPrefix string
	// Logger receives the store's line saying whether decisions run as
	// a Redis function or as EVALSHA scripts (see RedisOptions.Logger);
	// nil logs nothing.
	Logger *slog.Logger
	// Wrap is the Stack's top layer (see stack.Options.Wrap);
	// nil is none.
	Wrap func(ratelimit.Store) ratelimit.Store

	// breakerNow is the clock of the circuit breaker's cooldown; nil =
	// time.Now. Tests set it (see WithBreakerClock) to step past a
	// cooldown instead of waiting it out.
	breakerNow func() time.Time
}

// Open builds the fleet-wide decision stack on Redis: a RedisStore (script
// calls coalesced into pipelines, one queue per Cluster primary) under
// c.Timeout per decision, with token leases for the items that ask for
// them, behind a circuit breaker with one failure domain per Cluster
// primary (the primary owning a batch's last key, the tenant's slot), under
// a stack.Fallback. Unless c.FleetStatic is set, the instance
// registers in the fleet roster (see RedisRoster and stack.Fleet) and
// the local shares and lease blocks follow the live count; its heartbeats
// go through the circuit breaker (see stack.BreakerRoster), and
// closing the stack leaves the roster. Decisions do not connect until the
// first one.
func Open(c Config) *stack.Stack {
	client := NewRedisClient(RedisClientOptions{
		Addrs: c.Addrs, MasterName: c.MasterName, Username: c.Username, Password: c.Password,
		PoolSize: c.PoolSize, DialTimeout: max(c.Timeout, 250*time.Millisecond),
		ReadTimeout: c.Timeout, WriteTimeout: c.Timeout, TLS: c.TLS,
	})
	if c.Hook != nil {
		client.AddHook(c.Hook)
	}
	store := NewRedisStore(client, RedisOptions{Timeout: c.Timeout, Logger: c.Logger})
	// Items with a lease admit from blocks this instance reserved; the
	// others pass through to Redis on every decision. Blocks are sized
	// for the fleet, but the fleet is made last: its heartbeats go
	// through the breaker, which is made on the lease store. So fleet is
	// assigned below, and read only by this closure, which no call can
	// reach before that assignment (nor race with it):
	//   - the lease store calls it only when a decision sizes a block
	//     (lease.Store.instances); the sweeper lease.New starts only
	//     gives expired blocks back and sizes none;
	//   - nothing decides on the lease store before Open returns: only
	//     the breaker holds it, and of those Open gives the breaker to,
	//     the roster runs its own heartbeats through stack.Breaker.Do and
	//     stack.New makes no decision.
	// The first decision therefore comes after Open has returned, and
	// the assignment before.
	var fleet *stack.Fleet
	leased := lease.New(store, lease.Options{Fleet: func() int64 { return fleet.Size() }})
	bo := stack.BreakerOptions{Failures: c.BreakerFailures, Cooldown: c.BreakerCooldown, Now: c.breakerNow}
	if _, ok := client.(*redis.ClusterClient); ok {
		bo.Partition = func(ctx context.Context, items []ratelimit.Item) string {
			if len(items) == 0 {
				return ""
			}
			// No round trip: the breaker picks the domain before it
			// refuses a call, so a lookup here would cost every refused
			// call a CLUSTER SLOTS per seed while the Cluster has never
			// answered (the domain is then "").
			return store.KnownPrimary(ctx, items[len(items)-1].Key)
		}
		// A primary gone from the slot map (replaced by its replica)
		// leaves the breaker's domains, so that its last state is not
		// reported for the life of the process.
		bo.Live = store.IsPrimary
		// Readiness ("every breaker open") asks about every primary of
		// the slot map, not only those decisions happened to reach.
		bo.Domains = store.Primaries
	}
	breaker := stack.NewBreaker(leased, bo)
	fo := stack.FleetOptions{Floor: c.FleetSize, TTL: c.FleetTTL, ID: c.FleetID}
	if !c.FleetStatic {
		prefix := c.KeyPrefix
		if prefix == "" {
			prefix = "qg"
		}
		// Heartbeats skip a store the breaker knows to be down, rather
		// than each waiting out its timeout against it.
		key := RosterKey(prefix)
		fo.Roster = stack.BreakerRoster(NewRedisRoster(client, RosterOptions{Key: key}), breaker, key)
	}
	// From here the lease store's Fleet closure (above) has a fleet to read.
	fleet = stack.NewFleet(fo)
	return stack.New(breaker, stack.Options{
		Breaker: breaker,
		Slots:   store,
		Ping:    func(ctx context.Context) error { return PingRedis(ctx, client) },
		Now:     c.Now,
		Fleet:   fleet,
		Wrap:    c.Wrap,
	})
}
