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

// Cluster is a real Redis Cluster of primaries without replicas. Slots are
// split into equal contiguous ranges, in node order, and stay where they
// were put: there is no failover.
type Cluster struct {
	nodes []*Server
	first []int // first[i] is the first slot of nodes[i]
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

// WaitOK polls every node until each reports cluster_state:ok and knows
// all nodes, or timeout passes.
func (c *Cluster) WaitOK(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	wait := 5 * time.Millisecond
	for {
		err := c.checkOK()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster not ok after %v: %w", timeout, err)
		}
		time.Sleep(wait)
		wait = min(2*wait, 50*time.Millisecond)
	}
}

func (c *Cluster) checkOK() error {
	want := fmt.Sprintf("cluster_known_nodes:%d", len(c.nodes))
	for _, s := range c.nodes {
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

// Nodes returns the primaries in slot order.
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
