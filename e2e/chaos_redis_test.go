package e2e

import (
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/redistest"
)

// chaosRedis is the chaos run's Redis Cluster: three slot ranges, each
// served by a pair of nodes (a primary and its replica, whose roles the
// nemesis swaps), each node behind a TCP relay of its own that the node
// announces as its address (cluster-announce-port). Gateways reach the
// nodes through the relays only, and replicas their primaries too; the
// Cluster bus and the harness's own commands go direct.
type chaosRedis struct {
	t     testing.TB
	pairs [][2]*redistest.Server
	relay map[*redistest.Server]*tcpProxy
	// locks[i] is held by the nemesis action that changes range i's roles
	// or pauses one of its nodes; others on the range are skipped.
	locks []sync.Mutex

	mu     sync.Mutex
	paused map[*redistest.Server]bool // SIGSTOPped or dead: not to be asked

	// master, when set, makes it the Sentinel topology
	// (chaos_sentinel_test.go): one pair, a primary and its replica, not
	// in Cluster mode, followed by sentinels under that name.
	master    string
	sentinels []*redistest.Server
}

// sentinel reports whether c is the Sentinel topology.
func (c *chaosRedis) sentinel() bool { return c.master != "" }

// chaosBackend is a topology's Redis as the run sees it.
type chaosBackend interface {
	// configs returns the config of each gateway place of n, made by
	// base on the store addresses the topology gives.
	configs(base func(addrs []string) *gwConfig, n int) []*gwConfig
	// settle heals every link and waits until the store has recovered.
	settle() error
	// keys returns the keys left in the store with their TTLs in ms.
	keys(t testing.TB) map[string]int64
}

var (
	_ chaosBackend = (*chaosRedis)(nil)
	_ chaosBackend = (*chaosRegions)(nil)
)

// configs returns n places of one config on the relays (the Sentinels).
func (c *chaosRedis) configs(base func(addrs []string) *gwConfig, n int) []*gwConfig {
	cfg := base(c.seeds())
	cfg.Store.Redis.MasterName = c.master
	out := make([]*gwConfig, n)
	for k := range out {
		out[k] = cfg
	}
	return out
}

// settle heals every relay and waits until the nodes agree again.
func (c *chaosRedis) settle() error {
	for _, p := range c.relay {
		p.heal()
	}
	return c.waitAnnounced(40 * time.Second)
}

// startChaosRedis starts the Cluster with a replica per primary, puts a
// relay in front of each node and waits until every node announces its
// relay's port.
func startChaosRedis(t testing.TB, ranges int) *chaosRedis {
	t.Helper()
	cl := redistest.StartClusterWithReplicas(t, ranges)
	c := &chaosRedis{t: t, relay: map[*redistest.Server]*tcpProxy{}, locks: make([]sync.Mutex, ranges), paused: map[*redistest.Server]bool{}}
	for i, p := range cl.Nodes() {
		c.pairs = append(c.pairs, [2]*redistest.Server{p, cl.Replica(i)})
	}
	for _, s := range c.all() {
		c.relay[s] = startTCPProxy(t, s.Addr)
		if err := c.setup(s); err != nil {
			t.Fatalf("chaos: %v", err)
		}
	}
	if err := c.waitAnnounced(20 * time.Second); err != nil {
		t.Fatalf("chaos: %v", err)
	}
	return c
}

// setup sets what every node of the run needs: its relay as its announced
// address, partial availability with a primary down (as the fault tests
// do), and diskless syncs without delay.
func (c *chaosRedis) setup(s *redistest.Server) error {
	if c.sentinel() {
		return c.setupSentinelNode(s)
	}
	for _, kv := range [][2]string{
		{"cluster-announce-port", strconv.Itoa(relayPort(c.relay[s]))},
		{"cluster-require-full-coverage", "no"},
		{"repl-diskless-sync-delay", "0"},
	} {
		if _, err := s.Do("CONFIG", "SET", kv[0], kv[1]); err != nil {
			return fmt.Errorf("%s: CONFIG SET %s: %w", s.Addr, kv[0], err)
		}
	}
	return nil
}

func relayPort(p *tcpProxy) int {
	_, port, _ := strings.Cut(p.Addr, ":")
	n, _ := strconv.Atoi(port)
	return n
}

// all returns every node.
func (c *chaosRedis) all() []*redistest.Server {
	var out []*redistest.Server
	for _, p := range c.pairs {
		out = append(out, p[0], p[1])
	}
	return out
}

// seeds returns the relays' addresses, for the gateways (the sentinels'
// on Sentinel).
func (c *chaosRedis) seeds() []string {
	var out []string
	if c.sentinel() {
		for _, s := range c.sentinels {
			out = append(out, s.Addr)
		}
		return out
	}
	for _, s := range c.all() {
		out = append(out, c.relay[s].Addr)
	}
	return out
}

// waitAnnounced waits until every live node's CLUSTER SLOTS names only
// relay ports, its cluster_state is ok, and each replica replicates its
// primary through the primary's relay with the link up (a replica
// reconnects to the address its primary announces).
func (c *chaosRedis) waitAnnounced(timeout time.Duration) error {
	relays := map[int64]bool{}
	for _, p := range c.relay {
		relays[int64(relayPort(p))] = true
	}
	deadline := time.Now().Add(timeout)
	for {
		err := c.checkAnnounced(relays)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("Cluster not settled after %v: %w", timeout, err)
		}
		time.Sleep(50 * time.Millisecond) // polling external processes
	}
}

func (c *chaosRedis) checkAnnounced(relays map[int64]bool) error {
	if c.sentinel() {
		return c.checkSentinels(relays)
	}
	for _, s := range c.live() {
		v, err := s.Do("CLUSTER", "INFO")
		if err != nil {
			return err
		}
		if info, _ := v.(string); !strings.Contains(info, "cluster_state:ok") {
			return fmt.Errorf("%s: cluster_state not ok", s.Addr)
		}
		v, err = s.Do("INFO", "replication")
		if err != nil {
			return err
		}
		if info, _ := v.(string); strings.Contains(info, "role:slave") {
			port := int64(-1)
			for _, line := range strings.Split(info, "\r\n") {
				if v, ok := strings.CutPrefix(line, "master_port:"); ok {
					port, _ = strconv.ParseInt(v, 10, 64)
				}
			}
			if !relays[port] || !strings.Contains(info, "master_link_status:up") {
				return fmt.Errorf("%s: replicates port %d (not a relay, or link down)", s.Addr, port)
			}
		}
		v, err = s.Do("CLUSTER", "SLOTS")
		if err != nil {
			return err
		}
		ranges, _ := v.([]any)
		if len(ranges) < len(c.pairs) {
			return fmt.Errorf("%s: %d slot ranges served", s.Addr, len(ranges))
		}
		for _, rg := range ranges {
			f, _ := rg.([]any)
			for _, n := range f[2:] {
				node, _ := n.([]any)
				if len(node) >= 2 {
					if port, _ := node[1].(int64); !relays[port] {
						return fmt.Errorf("%s: CLUSTER SLOTS names port %d, not a relay", s.Addr, port)
					}
				}
			}
		}
	}
	return nil
}

// live returns the nodes neither paused nor dead.
func (c *chaosRedis) live() []*redistest.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*redistest.Server
	for _, s := range c.all() {
		if !c.paused[s] {
			out = append(out, s)
		}
	}
	return out
}

func (c *chaosRedis) setPaused(s *redistest.Server, v bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.paused[s] = v
}

// isPrimary reports whether s says it is a primary that serves slots (on
// Sentinel: a primary).
func (c *chaosRedis) isPrimary(s *redistest.Server) (bool, error) {
	if c.sentinel() {
		return rolePrimary(s)
	}
	return isPrimary(s)
}

// isPrimary reports whether the Cluster node s says it is a primary that
// serves slots.
func isPrimary(s *redistest.Server) (bool, error) {
	v, err := s.Do("CLUSTER", "NODES")
	if err != nil {
		return false, err
	}
	text, _ := v.(string)
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) >= 8 && strings.Contains(f[2], "myself") {
			return strings.Contains(f[2], "master") && len(f) > 8, nil
		}
	}
	return false, fmt.Errorf("%s: no myself line in CLUSTER NODES", s.Addr)
}

// roles returns range i's primary and replica as the nodes themselves
// say; an error when neither (or both) serves the slots.
func (c *chaosRedis) roles(i int) (primary, replica *redistest.Server, err error) {
	a, b := c.pairs[i][0], c.pairs[i][1]
	pa, err := c.isPrimary(a)
	if err != nil {
		return nil, nil, err
	}
	pb, err := c.isPrimary(b)
	if err != nil {
		return nil, nil, err
	}
	switch {
	case pa && !pb:
		return a, b, nil
	case pb && !pa:
		return b, a, nil
	}
	return nil, nil, fmt.Errorf("range %d: primaries %v %v", i, pa, pb)
}

// served returns the node the gateways reach for range i: its primary;
// on Sentinel, the node the first Sentinel names (while an old primary
// still says it is one too).
func (c *chaosRedis) served(i int) (*redistest.Server, error) {
	if !c.sentinel() {
		p, _, err := c.roles(i)
		return p, err
	}
	v, err := c.sentinels[0].Do("SENTINEL", "get-master-addr-by-name", c.master)
	if err != nil {
		return nil, err
	}
	addr, _ := v.([]any)
	for _, s := range c.all() {
		if len(addr) == 2 && fmt.Sprint(addr[1]) == strconv.Itoa(relayPort(c.relay[s])) {
			return s, nil
		}
	}
	return nil, fmt.Errorf("sentinel %s names %v, no relay of the pair", c.sentinels[0].Addr, v)
}

// waitPrimary waits until s serves range i's slots as a primary.
func (c *chaosRedis) waitPrimary(s *redistest.Server, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := c.isPrimary(s)
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not primary after %v (%v)", s.Addr, timeout, err)
		}
		time.Sleep(20 * time.Millisecond) // polling an external process
	}
}

// rejoin restarts s (killed) empty and makes it the replica of primary:
// the others forget its old id, it meets the primary and replicates it.
func (c *chaosRedis) rejoin(s, primary *redistest.Server) error {
	if c.sentinel() {
		return c.rejoinSentinel(s, primary)
	}
	oldID, _ := c.idOf(primary, s)
	s.Restart()
	c.setPaused(s, false)
	if err := c.setup(s); err != nil {
		return err
	}
	if oldID != "" {
		for _, o := range c.live() {
			if o != s {
				_, _ = o.Do("CLUSTER", "FORGET", oldID)
			}
		}
	}
	// Meet every live node, not the primary alone: a fresh node that
	// learns the others by gossip only, after many restarts, can keep a
	// partial view of the slot owners for tens of seconds.
	for _, o := range c.live() {
		if o == s {
			continue
		}
		if _, err := s.Do("CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(o.Port()), strconv.Itoa(o.BusPort())); err != nil && o == primary {
			return fmt.Errorf("MEET: %w", err)
		}
	}
	v, err := primary.Do("CLUSTER", "MYID")
	if err != nil {
		return err
	}
	id, _ := v.(string)
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := s.Do("CLUSTER", "REPLICATE", id)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("REPLICATE: %w", err)
		}
		time.Sleep(50 * time.Millisecond) // waiting for gossip
	}
}

// promote makes r its range's primary while its primary runs or after it
// died: CLUSTER FAILOVER with how ("", FORCE or TAKEOVER); on Sentinel,
// SENTINEL FAILOVER (how is not used: Sentinel has one way).
func (c *chaosRedis) promote(r *redistest.Server, how string) error {
	if c.sentinel() {
		return c.sentinelFailover()
	}
	args := []string{"CLUSTER", "FAILOVER"}
	if how != "" {
		args = append(args, how)
	}
	_, err := r.Do(args...)
	return err
}

// idOf returns the node id that from's CLUSTER NODES gives the node on
// s's relay port.
func (c *chaosRedis) idOf(from, s *redistest.Server) (string, error) {
	v, err := from.Do("CLUSTER", "NODES")
	if err != nil {
		return "", err
	}
	text, _ := v.(string)
	want := ":" + strconv.Itoa(relayPort(c.relay[s])) + "@"
	for _, line := range strings.Split(text, "\n") {
		if f := strings.Fields(line); len(f) >= 2 && strings.Contains(f[1], want) {
			return f[0], nil
		}
	}
	return "", fmt.Errorf("no node at %s", want)
}

// keys returns every key of every primary with its TTL in ms (-1: none).
func (c *chaosRedis) keys(t testing.TB) map[string]int64 {
	out := map[string]int64{}
	for i := range c.pairs {
		p, _, err := c.roles(i)
		if err != nil {
			t.Errorf("chaos: range %d after the run: %v", i, err)
			continue
		}
		maps.Copy(out, serverKeys(t, p))
	}
	return out
}
