package e2e

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/quotagate/quotagate/internal/redistest"
)

// chaosEvent is one fault of a schedule: what, on which slot range (or
// gateway place), when after traffic starts, for how long.
type chaosEvent struct {
	At    time.Duration
	Kind  string
	Range int           // slot range; gateway place for gateway-kill; -1 for none
	For   time.Duration // how long the fault lasts (a pause, a partition, a gateway down)
	Param time.Duration // the latency added (latency)
}

func (e chaosEvent) String() string {
	s := fmt.Sprintf("%6.2fs %-14s", e.At.Seconds(), e.Kind)
	if e.Range >= 0 {
		s += fmt.Sprintf(" #%d", e.Range)
	}
	if e.For > 0 {
		s += fmt.Sprintf(" for %v", e.For.Round(time.Millisecond))
	}
	if e.Param > 0 {
		s += fmt.Sprintf(" +%v", e.Param.Round(time.Millisecond))
	}
	return s
}

// chaosKind is a fault a schedule draws, with its weight. Every kind is
// a fault class of the report.
type chaosKind struct {
	kind   string
	weight int
}

// clusterKinds are the faults of the Cluster topology.
var clusterKinds = []chaosKind{
	{"pause-primary", 3}, // SIGSTOP the range's primary, SIGCONT after For (past 2 s the Cluster fails it over)
	{"pause-replica", 1}, // SIGSTOP its replica
	{"kill-primary", 2},  // SIGKILL the primary, CLUSTER FAILOVER TAKEOVER, restart it empty as the replica after For
	{"kill-lagging", 2},  // the replication link held For, the primary SIGKILLed, the link cut, TAKEOVER: the writes of For are lost
	{"failover", 2},      // CLUSTER FAILOVER (manual, graceful: the replica catches up first)
	{"failover-force", 2},
	{"latency", 2},   // Param more latency on the link to the primary, for For
	{"partition", 2}, // the link to the primary black-holed for For
	{"loss", 2},      // the link's connections dropped every 200 ms for For
	{"flush", 2},     // FUNCTION FLUSH and SCRIPT FLUSH on every node every 20 ms for For
	{"reload", 1},
	{"reload-invalid", 1},
	{"gateway-kill", 2}, // SIGKILL a gateway; a new one starts after For
	{"stall-body", 1},   // three callers stall a body
	{"hang-up", 1},      // five callers hang up mid-stream
}

// sentinelKinds are the faults of the Sentinel topology: the Cluster's,
// with Sentinel's one manual failover (SENTINEL FAILOVER, which does not
// wait for the replica to catch up) in place of CLUSTER FAILOVER and its
// FORCE; kill-primary and kill-lagging promote with SENTINEL FAILOVER
// too, and a primary paused past down-after-milliseconds (2 s) is failed
// over by the Sentinels themselves.
var sentinelKinds = []chaosKind{
	{"pause-primary", 3},
	{"pause-replica", 1},
	{"kill-primary", 2},
	{"kill-lagging", 2},
	{"sentinel-failover", 3},
	{"latency", 2},
	{"partition", 2},
	{"loss", 2},
	{"flush", 2},
	{"reload", 1},
	{"reload-invalid", 1},
	{"gateway-kill", 2},
	{"stall-body", 1},
	{"hang-up", 1},
}

// chaosSchedule draws the faults of a run of length d from seed: the
// same seed, length and shape give the same schedule. Faults start from
// 1.5 s, about 1.2 s apart (exponentially), and none starts in the last
// 3 s, so that the run ends with the system recovered; they overlap.
// The topology gives the kinds and the number of slot ranges.
func chaosSchedule(seed uint64, d time.Duration, topo chaosTopology, gateways int) []chaosEvent {
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	kinds, ranges := topo.kinds, topo.ranges
	total := 0
	for _, k := range kinds {
		total += k.weight
	}
	between := func(lo, hi time.Duration) time.Duration {
		return lo + time.Duration(rng.Int64N(int64(hi-lo)))
	}
	var out []chaosEvent
	for at := 1500 * time.Millisecond; at < d-3*time.Second; at += time.Duration(rng.ExpFloat64() * float64(1200*time.Millisecond)) {
		n := rng.IntN(total)
		kind := ""
		for _, k := range kinds {
			if n < k.weight {
				kind = k.kind
				break
			}
			n -= k.weight
		}
		e := chaosEvent{At: at.Round(time.Millisecond), Kind: kind, Range: rng.IntN(ranges)}
		switch kind {
		case "pause-primary":
			e.For = between(300*time.Millisecond, 4*time.Second)
		case "pause-replica":
			e.For = between(300*time.Millisecond, 3*time.Second)
		case "kill-primary":
			e.For = between(500*time.Millisecond, 2*time.Second)
		case "kill-lagging":
			e.For = between(200*time.Millisecond, 1500*time.Millisecond)
		case "latency", "region-latency":
			e.For, e.Param = between(500*time.Millisecond, 3*time.Second), between(20*time.Millisecond, 300*time.Millisecond)
		case "region-partition":
			e.For = between(time.Second, 10*time.Second)
		case "global-pause":
			e.Range, e.For = -1, between(300*time.Millisecond, 4*time.Second)
		case "partition":
			e.For = between(300*time.Millisecond, 2*time.Second)
		case "loss", "flush":
			e.For = between(200*time.Millisecond, 2*time.Second)
		case "gateway-kill":
			e.Range, e.For = rng.IntN(gateways), between(200*time.Millisecond, time.Second)
		case "reload", "reload-invalid", "stall-body", "hang-up":
			e.Range = -1
		}
		e.For = e.For.Round(time.Millisecond)
		e.Param = e.Param.Round(time.Millisecond)
		out = append(out, e)
	}
	return out
}

// clusterNodeTimeout is the Cluster's cluster-node-timeout (redistest),
// and the Sentinels' down-after-milliseconds: a primary silent this long
// is failed over.
const clusterNodeTimeout = 2 * time.Second

// chaosNemesis carries out a schedule against the run's Cluster, fleet
// and callers, and records each fault as it happened.
type chaosNemesis struct {
	redis *chaosRedis // nil on the regions topology
	// regions is the regions topology's Redis (nil on the others).
	regions *chaosRegions
	fleet   *chaosFleet
	caller  *chaosCaller
	tenant  func(n int) string

	mu     sync.Mutex
	faults []chaosFault
	relays map[*tcpProxy]*sync.Mutex
}

func (n *chaosNemesis) record(f chaosFault) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.faults = append(n.faults, f)
}

// relayLock returns the lock of p, held by the action degrading it.
func (n *chaosNemesis) relayLock(p *tcpProxy) *sync.Mutex {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.relays == nil {
		n.relays = map[*tcpProxy]*sync.Mutex{}
	}
	if n.relays[p] == nil {
		n.relays[p] = &sync.Mutex{}
	}
	return n.relays[p]
}

// run carries out events, each at its time after start, each in its own
// goroutine (so they overlap), and returns once all have ended.
func (n *chaosNemesis) run(start time.Time, events []chaosEvent) {
	var wg sync.WaitGroup
	for i, e := range events {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Until(start.Add(e.At))) // the schedule's time
			f := chaosFault{Class: e.Kind, Range: e.Range, Start: time.Now()}
			note, err := n.do(e, i, &f)
			if f.End.IsZero() {
				f.End = time.Now()
			}
			if err != nil {
				f.Note = "skipped: " + err.Error()
				f.Class = "skipped"
			} else {
				f.Note = note
			}
			n.record(f)
		}()
	}
	wg.Wait()
}

// do carries out e; the note says what happened; an error says why it
// was not done (the fault then counts as skipped).
func (n *chaosNemesis) do(e chaosEvent, i int, f *chaosFault) (string, error) {
	switch e.Kind {
	case "pause-primary", "pause-replica", "kill-primary", "kill-lagging", "failover", "failover-force", "sentinel-failover":
		lock := &n.redis.locks[e.Range]
		if !lock.TryLock() {
			return "", fmt.Errorf("range %d busy", e.Range)
		}
		defer lock.Unlock()
		p, r, err := n.redis.roles(e.Range)
		if err != nil {
			return "", err
		}
		if !replicaLinked(r) {
			return "", fmt.Errorf("range %d: replica %s not linked", e.Range, r.Addr)
		}
		switch e.Kind {
		case "pause-primary":
			return n.pausePrimary(e, p, r, f)
		case "pause-replica":
			n.redis.setPaused(r, true)
			r.Pause()
			time.Sleep(e.For) // the fault's length
			r.Resume()
			n.redis.setPaused(r, false)
			return "replica " + r.Addr + " paused", nil
		case "kill-primary", "kill-lagging":
			return n.killPrimary(e, p, r, f)
		default:
			return n.failover(e, p, r, f)
		}
	case "latency", "partition", "loss":
		p, err := n.redis.served(e.Range)
		if err != nil {
			return "", err
		}
		relay := n.redis.relay[p]
		lock := n.relayLock(relay)
		if !lock.TryLock() {
			return "", fmt.Errorf("link to %s busy", p.Addr)
		}
		defer lock.Unlock()
		switch e.Kind {
		case "latency":
			relay.setDelay(e.Param)
			time.Sleep(e.For) // the fault's length
		case "partition":
			relay.blackhole()
			time.Sleep(e.For) // the fault's length
		case "loss":
			dropped := 0
			for end := time.Now().Add(e.For); time.Now().Before(end); {
				dropped += relay.drop()
				time.Sleep(200 * time.Millisecond) // between losses
			}
			relay.heal()
			return fmt.Sprintf("link to %s: %d connections dropped", p.Addr, dropped), nil
		}
		relay.heal()
		return "link to " + p.Addr, nil
	case "region-partition", "region-latency", "global-pause":
		return n.regions.do(n, e)
	case "flush":
		count := 0
		for end := time.Now().Add(e.For); time.Now().Before(end); count++ {
			var servers []*redistest.Server
			if n.regions != nil {
				servers = n.regions.servers()
			} else {
				servers = n.redis.live()
			}
			for _, s := range servers {
				_, _ = s.Do("FUNCTION", "FLUSH")
				_, _ = s.Do("SCRIPT", "FLUSH")
			}
			time.Sleep(20 * time.Millisecond) // between flushes
		}
		return fmt.Sprintf("%d rounds", count), nil
	case "reload":
		next := n.fleet.reload(toggleNoopRoute)
		return fmt.Sprintf("%d routes", len(next.Routes)), nil
	case "reload-invalid":
		n.fleet.reloadInvalid(500 * time.Millisecond)
		return "unknown key, for 500ms", nil
	case "gateway-kill":
		at, err := n.fleet.kill(e.Range, e.For)
		if err != nil {
			return "", err
		}
		f.Start = at
		return fmt.Sprintf("place %d", e.Range), nil
	case "stall-body":
		var wg sync.WaitGroup
		for k := range 3 {
			wg.Add(1)
			go func() { defer wg.Done(); n.caller.stallBody(n.tenant(i+k), i+k, 5*time.Second) }()
		}
		wg.Wait()
		return "3 bodies", nil
	case "hang-up":
		var wg sync.WaitGroup
		for k := range 5 {
			wg.Add(1)
			go func() { defer wg.Done(); n.caller.hangUp(n.tenant(i+k), i+k) }()
		}
		wg.Wait()
		return "5 streams", nil
	}
	return "", fmt.Errorf("unknown fault %q", e.Kind)
}

// pausePrimary SIGSTOPs p for e.For. Past cluster-node-timeout (the
// Sentinels' down-after-milliseconds) r is promoted, which may lose
// writes p acknowledged: then a second fault, failover-auto, is recorded
// from the moment the timeout passed until the promotion was seen.
func (n *chaosNemesis) pausePrimary(e chaosEvent, p, r *redistest.Server, f *chaosFault) (string, error) {
	n.redis.setPaused(p, true)
	p.Pause()
	time.Sleep(e.For) // the fault's length
	p.Resume()
	n.redis.setPaused(p, false)
	f.End = time.Now()
	if e.For < clusterNodeTimeout {
		return "no failover (shorter than cluster-node-timeout)", nil
	}
	// Was it failed over? A resumed Cluster node learns it within a few
	// gossip rounds; the Sentinels may still be promoting r when p
	// resumes (and leave p a primary too until they turn it into a
	// replica, some 8 s later), so r's own role tells.
	deadline := time.Now().Add(3 * time.Second)
	if n.redis.sentinel() {
		deadline = time.Now().Add(6 * time.Second)
	}
	for time.Now().Before(deadline) {
		rp, _ := n.redis.isPrimary(r)
		pp, _ := n.redis.isPrimary(p)
		if rp && (!pp || n.redis.sentinel()) {
			n.record(chaosFault{Class: "failover-auto", Range: e.Range, Start: f.Start.Add(clusterNodeTimeout), End: n.redis.promotionSeen(r),
				LosesWrites: true, Note: r.Addr + " promoted"})
			if err := n.redis.waitLinked(p, 20*time.Second); err != nil {
				return "failed over; " + err.Error(), nil
			}
			return "failed over to " + r.Addr, nil
		}
		time.Sleep(50 * time.Millisecond) // polling external processes
	}
	return "no failover", nil
}

// killPrimary SIGKILLs p, promotes r (CLUSTER FAILOVER TAKEOVER; on
// Sentinel, SENTINEL FAILOVER), and after e.For (kill-primary; 1 s for
// kill-lagging) restarts p empty as r's replica. For kill-lagging the
// replication link is held e.For before the kill and cut after it: what
// p acknowledged meanwhile never reached r.
func (n *chaosNemesis) killPrimary(e chaosEvent, p, r *redistest.Server, f *chaosFault) (string, error) {
	f.LosesWrites = true
	down := e.For
	note := ""
	if e.Kind == "kill-lagging" {
		n.redis.relay[p].holdReplication()
		time.Sleep(e.For) // the replica's lag
		down = time.Second
	}
	n.redis.setPaused(p, true)
	p.Kill()
	if e.Kind == "kill-lagging" {
		note = fmt.Sprintf("%d replication links cut; ", n.redis.relay[p].cutReplication())
	}
	if err := n.redis.promote(r, "TAKEOVER"); err != nil {
		return note + "promotion refused: " + err.Error(), nil
	}
	err := n.redis.waitPrimary(r, 10*time.Second)
	f.End = n.redis.promotionSeen(r)
	if err != nil {
		return note + err.Error(), nil
	}
	time.Sleep(down) // the node stays down
	if err := n.redis.rejoin(p, r); err != nil {
		return note + "promoted " + r.Addr + "; rejoin: " + err.Error(), nil
	}
	if err := n.redis.waitLinked(p, 15*time.Second); err != nil {
		return note + "promoted " + r.Addr + "; " + err.Error(), nil
	}
	return note + "promoted " + r.Addr + ", " + p.Addr + " back as its replica", nil
}

// failover promotes r while p runs: CLUSTER FAILOVER (FORCE for
// failover-force), or SENTINEL FAILOVER (sentinel-failover); it waits
// until r serves the range and p follows it. Only CLUSTER FAILOVER
// without FORCE waits for r to catch up: the others may lose writes.
func (n *chaosNemesis) failover(e chaosEvent, p, r *redistest.Server, f *chaosFault) (string, error) {
	how := ""
	if e.Kind == "failover-force" {
		how = "FORCE"
	}
	f.LosesWrites = e.Kind != "failover"
	if err := n.redis.promote(r, how); err != nil {
		return "", err
	}
	deadline := time.Now().Add(8 * time.Second)
	for {
		rp, _ := n.redis.isPrimary(r)
		pp, _ := n.redis.isPrimary(p)
		if rp && (!pp || n.redis.sentinel()) {
			break
		}
		if time.Now().After(deadline) {
			f.End = time.Now()
			return fmt.Sprintf("roles not swapped after 8s (new %v, old %v)", rp, pp), nil
		}
		time.Sleep(20 * time.Millisecond) // polling external processes
	}
	f.End = n.redis.promotionSeen(r)
	if err := n.redis.waitLinked(p, 20*time.Second); err != nil {
		return "promoted " + r.Addr + "; " + err.Error(), nil
	}
	return "promoted " + r.Addr, nil
}

// replicaLinked reports whether s is a replica whose link to its primary
// is up.
func replicaLinked(s *redistest.Server) bool {
	v, err := s.Do("INFO", "replication")
	info, _ := v.(string)
	return err == nil && strings.Contains(info, "role:slave") && strings.Contains(info, "master_link_status:up")
}

// waitLinked waits until s is a replica with its link up.
func (c *chaosRedis) waitLinked(s *redistest.Server, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for !replicaLinked(s) {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not a linked replica after %v", s.Addr, timeout)
		}
		time.Sleep(50 * time.Millisecond) // polling an external process
	}
	return nil
}

// toggleNoopRoute returns cfg with the route "noop" added, or removed if
// it is there: a valid reload that changes no limit.
func toggleNoopRoute(cfg *gwConfig) *gwConfig {
	out := *cfg
	out.Routes = nil
	found := false
	for _, r := range cfg.Routes {
		if r.Name == "noop" {
			found = true
			continue
		}
		out.Routes = append(out.Routes, r)
	}
	if !found {
		out.Routes = append(out.Routes, routeCfg{Name: "noop", Method: "GET", Path: "/noop", Upstream: "up"})
	}
	return &out
}
