package stack

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Roster is the shared register of the instances of a fleet: each
// instance renews its registration before it expires, and the members
// whose registration has not expired are the live fleet. redisstore's
// RedisRoster is one.
type Roster interface {
	// Heartbeat registers id until ttl from now on the roster's clock
	// (renewing an earlier registration of id) and returns how many ids
	// are registered and unexpired, id included, so at least 1. Errors
	// wrap ErrUnavailable.
	Heartbeat(ctx context.Context, id string, ttl time.Duration) (int, error)
	// Leave removes the registration of id, if any.
	Leave(ctx context.Context, id string) error
}

// FleetOptions configure a Fleet. Zero values take the defaults.
type FleetOptions struct {
	// Roster is where the instance registers; nil means it registers
	// nowhere and counts itself alone (a live count of 1), as a memory
	// store or a fleet of a fixed size does. BreakerRoster makes its
	// calls skip a store that the store's circuit breaker knows is down.
	Roster Roster
	// ID names this instance in the roster; "" means a new one made of
	// the host name, the process id and 8 random bytes. Two Fleets must
	// not share an ID.
	ID string
	// TTL is how long a registration lasts without a heartbeat; 0 means
	// DefaultFleetTTL.
	TTL time.Duration
	// Every is how often the background goroutine sends a heartbeat; 0
	// means TTL/3, so a registration survives two lost heartbeats. A
	// negative value starts no goroutine: the caller calls Beat.
	Every time.Duration
	// Timeout bounds each heartbeat and the Leave of Close; 0 means
	// min(Every, 1s) (1s when Every is negative).
	Timeout time.Duration
	// Floor is the least size the Fleet reports, whatever the live count;
	// 0 or less means 1.
	Floor int
}

// DefaultFleetTTL is the registration TTL of a Fleet when none is given.
const DefaultFleetTTL = 15 * time.Second

// Fleet knows how many instances share a store: the live count of a
// Roster, kept fresh by a heartbeat, never below a configured floor.
//
// Size is max(Floor, live), where live is the count the last successful
// heartbeat returned. Before the first one succeeds, live is 1 (this
// instance), so Size is the floor; while the roster cannot be reached
// (a store outage), live stays the last count known. The first heartbeat
// goes out one Every after NewFleet. An instance that
// stops heartbeating (it crashed, or lost the store) drops out of the
// others' counts at their first heartbeat after its registration's TTL;
// an instance that closes its Fleet leaves at once, and drops out of the
// others' counts at their next heartbeat. A change of the fleet is
// therefore seen within TTL + Every.
//
// A Fleet is safe for concurrent use. Size is one atomic load.
type Fleet struct {
	roster  Roster
	id      string
	ttl     time.Duration
	timeout time.Duration
	floor   int64

	live  atomic.Int64
	known atomic.Bool

	quit    chan struct{}
	stopped sync.WaitGroup
	once    sync.Once
}

// NewFleet returns a Fleet. With a Roster and Every not negative it
// starts a goroutine that sends a heartbeat every Every, the first one
// Every after the start; Close stops it.
func NewFleet(o FleetOptions) *Fleet {
	if o.TTL <= 0 {
		o.TTL = DefaultFleetTTL
	}
	if o.Every == 0 {
		o.Every = o.TTL / 3
	}
	if o.Timeout <= 0 {
		o.Timeout = time.Second
		if o.Every > 0 {
			o.Timeout = min(o.Every, time.Second)
		}
	}
	if o.ID == "" {
		o.ID = NewInstanceID()
	}
	f := &Fleet{roster: o.Roster, id: o.ID, ttl: o.TTL, timeout: o.Timeout,
		floor: int64(max(o.Floor, 1)), quit: make(chan struct{})}
	f.live.Store(1)
	if f.roster != nil && o.Every > 0 {
		f.stopped.Add(1)
		go f.heartbeat(o.Every)
	}
	return f
}

// NewInstanceID returns an id for this process that no other instance
// has: host name, process id and 8 random bytes in hex.
func NewInstanceID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// ID returns the name this instance registers under.
func (f *Fleet) ID() string { return f.id }

// TTL returns how long a registration lasts without a heartbeat.
func (f *Fleet) TTL() time.Duration { return f.ttl }

// Size returns the number of instances to divide shared limits by:
// max(Floor, the last live count known), at least 1.
func (f *Fleet) Size() int64 { return max(f.floor, f.live.Load()) }

// Live returns the live count of the last successful heartbeat, and
// whether one succeeded yet (before that, it returns 1, false).
func (f *Fleet) Live() (int64, bool) { return f.live.Load(), f.known.Load() }

// Beat sends one heartbeat and, when it succeeds, takes the live count it
// returned. On error the last count known stays. Without a Roster it
// does nothing. The background goroutine calls it; tests that drive
// time call it themselves.
func (f *Fleet) Beat(ctx context.Context) error {
	if f.roster == nil {
		return nil
	}
	n, err := f.roster.Heartbeat(ctx, f.id, f.ttl)
	if err != nil {
		return err
	}
	f.live.Store(int64(max(n, 1)))
	f.known.Store(true)
	return nil
}

// heartbeat calls Beat every period until Close, the first time one
// period after the start: an instance's first moments belong to its
// startup checks and first decisions, and a fleet that starts at once
// does not register at once.
func (f *Fleet) heartbeat(every time.Duration) {
	defer f.stopped.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-f.quit:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
		_ = f.Beat(ctx) // a failure keeps the last count; the next tick retries
		cancel()
	}
}

// Close stops the heartbeat and removes this instance from the roster
// (under the heartbeat timeout), so that the others count it out at their
// next heartbeat rather than after TTL. It returns the Leave's error.
// Calls after the first do nothing.
func (f *Fleet) Close() error {
	var err error
	f.once.Do(func() {
		close(f.quit)
		f.stopped.Wait()
		if f.roster == nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
		defer cancel()
		err = f.roster.Leave(ctx, f.id)
	})
	return err
}
