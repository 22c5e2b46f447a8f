package redistest

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// NumSlots is the number of hash slots of a Redis Cluster.
const NumSlots = 16384

// Cluster is a real Redis Cluster. Slots are split into equal contiguous
// ranges, in primary order, and stay with their range's primary, or with
// its replica once Failover promoted it (StartClusterWithReplicas).
type Cluster struct {
	nodes    []*Server
	first    []int     // first[i] is the first slot of nodes[i]
	replicas []*Server // replicas[i] follows nodes[i]; nil without one
	gone     []*Server // primaries that Failover killed
}

// StartCluster starts primaries cluster-enabled servers, assigns every slot,
// joins them and waits until every node reports cluster_state:ok and knows
// every other node. The nodes are stopped when tb ends.
func StartCluster(tb testing.TB, primaries int) *Cluster {
	tb.Helper()
	if primaries < 1 || primaries > NumSlots {
		tb.Fatalf("redistest: StartCluster with %d primaries", primaries)
	}
	bin := RedisServerPath(tb)
	c := &Cluster{nodes: make([]*Server, primaries), first: make([]int, primaries)}
	errs := make(chan error, primaries)
	for i := range c.nodes {
		dir := tb.TempDir()
		go func() {
			s, err := newServer(bin, dir, true)
			if err == nil {
				s.tb = tb
				c.nodes[i] = s
			}
			errs <- err
		}()
	}
	var failed error
	for range primaries {
		if err := <-errs; err != nil && failed == nil {
			failed = err
		}
	}
	for _, s := range c.nodes {
		if s != nil {
			tb.Cleanup(s.stop)
		}
	}
	if failed != nil {
		tb.Fatalf("redistest: starting cluster node: %v", failed)
	}
	if err := c.form(); err != nil {
		tb.Fatalf("redistest: forming cluster: %v", err)
	}
	return c
}

// StartClusterWithReplicas is StartCluster with one replica per primary
// (CLUSTER REPLICATE), so that Failover can promote it. It returns once
// every node reports cluster_state:ok and knows every other node, and each
// replica's link to its primary is up.
func StartClusterWithReplicas(tb testing.TB, primaries int) *Cluster {
	tb.Helper()
	c := StartCluster(tb, primaries)
	bin := RedisServerPath(tb)
	c.replicas = make([]*Server, primaries)
	for i, p := range c.nodes {
		r, err := newServer(bin, tb.TempDir(), true)
		if err != nil {
			tb.Fatalf("redistest: starting replica: %v", err)
		}
		r.tb = tb
		tb.Cleanup(r.stop)
		c.replicas[i] = r
		if err := c.replicate(r, p); err != nil {
			tb.Fatalf("redistest: replica of %s: %v", p.Addr, err)
		}
	}
	if err := c.WaitOK(StartTimeout); err != nil {
		tb.Fatalf("redistest: cluster with replicas: %v", err)
	}
	for i, r := range c.replicas {
		if err := poll(StartTimeout, func() error { return linkUp(r, c.nodes[i]) }); err != nil {
			tb.Fatalf("redistest: replica %s: %v", r.Addr, err)
		}
	}
	return c
}

// replicate introduces r to the Cluster and makes it a replica of p, once
// r has learnt p's id by gossip.
func (c *Cluster) replicate(r, p *Server) error {
	// The primary would wait 5s for more replicas before a diskless
	// full sync.
	if _, err := p.Do("CONFIG", "SET", "repl-diskless-sync-delay", "0"); err != nil {
		return fmt.Errorf("CONFIG SET: %w", err)
	}
	if _, err := r.Do("CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(p.port), strconv.Itoa(p.busPort)); err != nil {
		return fmt.Errorf("MEET: %w", err)
	}
	id, err := nodeID(p)
	if err != nil {
		return err
	}
	return poll(StartTimeout, func() error {
		_, err := r.Do("CLUSTER", "REPLICATE", id)
		return err
	})
}

// nodeID returns s's Cluster node id.
func nodeID(s *Server) (string, error) {
	v, err := s.Do("CLUSTER", "MYID")
	if err != nil {
		return "", fmt.Errorf("%s: CLUSTER MYID: %w", s.Addr, err)
	}
	id, _ := v.(string)
	return id, nil
}

// linkUp reports nil once r replicates p with its link up.
func linkUp(r, p *Server) error {
	v, err := r.Do("INFO", "replication")
	if err != nil {
		return err
	}
	info, _ := v.(string)
	if !strings.Contains(info, "master_port:"+strconv.Itoa(p.port)) || !strings.Contains(info, "master_link_status:up") {
		return fmt.Errorf("not replicating %s:\n%s", p.Addr, info)
	}
	return nil
}

// Failover kills the primary of the i-th slot range (SIGKILL: it is gone,
// as after a host failure) and promotes its replica at once with CLUSTER
// FAILOVER TAKEOVER, without waiting for cluster-node-timeout. It returns
// the new primary once every live node reports cluster_state:ok and names
// it as the owner of the range (CLUSTER SLOTS). The Cluster must have
// been started with StartClusterWithReplicas; a range fails over once.
func (c *Cluster) Failover(tb testing.TB, i int) *Server {
	tb.Helper()
	old, r := c.nodes[i], c.replicas[i]
	if r == nil {
		tb.Fatalf("redistest: Failover of range %d, which has no replica", i)
	}
	old.Kill()
	if _, err := r.Do("CLUSTER", "FAILOVER", "TAKEOVER"); err != nil {
		tb.Fatalf("redistest: CLUSTER FAILOVER TAKEOVER on %s: %v", r.Addr, err)
	}
	c.nodes[i], c.replicas[i], c.gone = r, nil, append(c.gone, old)
	err := poll(StartTimeout, func() error {
		if err := c.checkOK(); err != nil {
			return err
		}
		for _, s := range c.live() {
			if err := owns(s, c.first[i], r.port); err != nil {
				return fmt.Errorf("%s: %w", s.Addr, err)
			}
		}
		return nil
	})
	if err != nil {
		tb.Fatalf("redistest: failover of %s to %s: %v", old.Addr, r.Addr, err)
	}
	return r
}

// owns reports nil once s's CLUSTER SLOTS names the node on port as the
// owner of slot.
func owns(s *Server, slot, port int) error {
	v, err := s.Do("CLUSTER", "SLOTS")
	if err != nil {
		return err
	}
	ranges, _ := v.([]any)
	for _, rg := range ranges {
		f, _ := rg.([]any)
		if len(f) < 3 {
			continue
		}
		lo, _ := f[0].(int64)
		hi, _ := f[1].(int64)
		if int64(slot) < lo || int64(slot) > hi {
			continue
		}
		owner, _ := f[2].([]any)
		if len(owner) >= 2 {
			if p, _ := owner[1].(int64); p == int64(port) {
				return nil
			}
		}
		return fmt.Errorf("slot %d owned by %v, want port %d", slot, owner, port)
	}
	return fmt.Errorf("slot %d not served", slot)
}

// poll calls f until it returns nil or timeout passes, then returns its
// last error.
func poll(timeout time.Duration, f func() error) error {
	deadline := time.Now().Add(timeout)
	wait := 5 * time.Millisecond
	for {
		err := f()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %v: %w", timeout, err)
		}
		time.Sleep(wait)
		wait = min(2*wait, 50*time.Millisecond)
	}
}

// live returns the nodes that run: primaries and replicas.
func (c *Cluster) live() []*Server {
	out := append([]*Server(nil), c.nodes...)
	for _, r := range c.replicas {
		if r != nil {
			out = append(out, r)
		}
	}
	return out
}

// form assigns slots and epochs, introduces the nodes to each other and
// waits for them to agree.
func (c *Cluster) form() error {
	n := len(c.nodes)
	for i, s := range c.nodes {
		lo, hi := i*NumSlots/n, (i+1)*NumSlots/n-1
		c.first[i] = lo
		if _, err := s.Do("CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(lo), strconv.Itoa(hi)); err != nil {
			return fmt.Errorf("%s: ADDSLOTSRANGE: %w", s.Addr, err)
		}
		// Distinct epochs spare the nodes the collision resolution that
		// would otherwise delay agreement.
		if _, err := s.Do("CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i+1)); err != nil {
			return fmt.Errorf("%s: SET-CONFIG-EPOCH: %w", s.Addr, err)
		}
	}
	for i, s := range c.nodes {
		for _, o := range c.nodes[i+1:] {
			if _, err := s.Do("CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(o.port), strconv.Itoa(o.busPort)); err != nil {
				return fmt.Errorf("%s: MEET %s: %w", s.Addr, o.Addr, err)
			}
		}
	}
	return c.WaitOK(StartTimeout)
}

// WaitOK polls every live node until each reports cluster_state:ok and
// knows all nodes (those Failover killed included), or timeout passes.
func (c *Cluster) WaitOK(timeout time.Duration) error {
	if err := poll(timeout, c.checkOK); err != nil {
		return fmt.Errorf("cluster not ok: %w", err)
	}
	return nil
}

func (c *Cluster) checkOK() error {
	live := c.live()
	want := fmt.Sprintf("cluster_known_nodes:%d", len(live)+len(c.gone))
	for _, s := range live {
		r, err := s.Do("CLUSTER", "INFO")
		if err != nil {
			return fmt.Errorf("%s: %w", s.Addr, err)
		}
		info, _ := r.(string)
		if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, want) {
			return fmt.Errorf("%s: not ready:\n%s", s.Addr, info)
		}
	}
	return nil
}

// Addrs returns the nodes' addresses, to seed a cluster client.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.nodes))
	for i, s := range c.nodes {
		out[i] = s.Addr
	}
	return out
}

// Nodes returns the primaries in slot order (after Failover, the replica
// it promoted in place of the primary it killed).
func (c *Cluster) Nodes() []*Server { return append([]*Server(nil), c.nodes...) }

// PrimaryForSlot returns the node that owns slot.
func (c *Cluster) PrimaryForSlot(slot int) *Server {
	for i := len(c.first) - 1; i >= 0; i-- {
		if slot >= c.first[i] {
			return c.nodes[i]
		}
	}
	return c.nodes[0]
}

// PrimaryForKey returns the node that owns key's slot.
func (c *Cluster) PrimaryForKey(key string) *Server { return c.PrimaryForSlot(Slot(key)) }

// HashTag returns the part of key that Redis Cluster hashes: the text
// between the first "{" and the next "}" when it is not empty, otherwise
// the whole key.
func HashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// Slot returns the cluster hash slot of key: CRC16 (XMODEM) of its hash
// tag, modulo 16384.
func Slot(key string) int {
	var crc uint16
	for _, b := range []byte(HashTag(key)) {
		crc ^= uint16(b) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % NumSlots
}

// Replica returns the replica of the i-th slot range's primary, nil when
// it has none (StartCluster, or after Failover promoted it).
func (c *Cluster) Replica(i int) *Server {
	if c.replicas == nil {
		return nil
	}
	return c.replicas[i]
}
