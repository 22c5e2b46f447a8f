package main

import (
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/ratelimit/redisstore"
)

// TestStoresOfOneProcessCountOnce: the stores one opener opens (the
// gateway's and the decision service's) register in the fleet roster under
// one id, so the process counts as one instance; another opener (another
// process) counts as a second.
func TestStoresOfOneProcessCountOnce(t *testing.T) {
	srv := redistest.StartStandalone(t)
	c := config.Store{Kind: "redis", FleetSize: 1, Fleet: config.Fleet{TTL: 1500 * time.Millisecond},
		Redis: config.Redis{Addrs: []string{srv.Addr}, Timeout: time.Second, PoolSize: 4, KeyPrefix: "qg",
			BreakerFailures: 5, BreakerCooldown: time.Second}}
	open := storeOpener(slog.New(slog.DiscardHandler), os.LookupEnv)
	gw, err := open(c)
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	ds, err := open(c)
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	if gw.Fleet().ID() != ds.Fleet().ID() {
		t.Fatalf("one process registers as %q and %q", gw.Fleet().ID(), ds.Fleet().ID())
	}
	other, err := storeOpener(slog.New(slog.DiscardHandler), os.LookupEnv)(c)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()

	// Heartbeats run on real time (one every 500ms): wait until every
	// store has counted, then read the counts.
	deadline := time.Now().Add(10 * time.Second)
	for _, s := range []interface{ Live() (int64, bool) }{gw.Fleet(), ds.Fleet(), other.Fleet()} {
		for n, known := s.Live(); !known || n < 2; n, known = s.Live() {
			if time.Now().After(deadline) {
				t.Fatalf("missed deadline: a store had not counted 2 instances after 10s (last: %d, %v)", n, known)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if n := srv.MustDo(t, "ZCARD", redisstore.RosterKey("qg")); n != int64(2) {
		t.Fatalf("roster holds %v members, want 2 (one per process)", n)
	}
	for _, s := range []int64{gw.FleetSize(), ds.FleetSize(), other.FleetSize()} {
		if s != 2 {
			t.Fatalf("fleet sizes %d %d %d, want 2 each", gw.FleetSize(), ds.FleetSize(), other.FleetSize())
		}
	}
}
