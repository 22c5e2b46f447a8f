package e2e

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/redistest"
)

// The Sentinel topology of the chaos suite: a primary and its replica
// (standalone servers), each behind a relay of its own that it announces
// (replica-announce-port), and three Sentinels (quorum 2,
// down-after-milliseconds 2 s as the Cluster's node timeout) that monitor
// the primary through its relay, so that the address they name to the
// gateways is a relay's. The Sentinels' own links pass the relays
// untouched (tcpProxy.sentinel): the faults of the gateways' links do not
// reach them, as the Cluster's bus goes direct. It is one slot range: the
// pair.

// chaosMasterName is the name the Sentinels know the primary by.
const chaosMasterName = "chaos"

// startChaosSentinel starts the pair, its relays and the Sentinels, and
// waits until all agree.
func startChaosSentinel(t testing.TB) *chaosRedis {
	t.Helper()
	p, r := redistest.StartStandalone(t), redistest.StartStandalone(t)
	c := &chaosRedis{t: t, pairs: [][2]*redistest.Server{{p, r}}, relay: map[*redistest.Server]*tcpProxy{},
		locks: make([]sync.Mutex, 1), paused: map[*redistest.Server]bool{}, master: chaosMasterName}
	for _, s := range c.all() {
		c.relay[s] = startTCPProxy(t, s.Addr)
		if err := c.setup(s); err != nil {
			t.Fatalf("chaos: %v", err)
		}
	}
	if _, err := r.Do("REPLICAOF", "127.0.0.1", strconv.Itoa(relayPort(c.relay[p]))); err != nil {
		t.Fatalf("chaos: REPLICAOF: %v", err)
	}
	if err := c.waitLinked(r, 10*time.Second); err != nil {
		t.Fatalf("chaos: %v", err)
	}
	for range 3 {
		c.sentinels = append(c.sentinels, redistest.StartSentinelWith(t, c.relay[p].Addr, chaosMasterName, redistest.SentinelOptions{
			Quorum: 2, DownAfter: clusterNodeTimeout, FailoverTimeout: 3 * time.Second}))
	}
	if err := c.waitAnnounced(30 * time.Second); err != nil {
		t.Fatalf("chaos: %v", err)
	}
	return c
}

// setupSentinelNode sets what a node of the pair needs: its relay as the
// port it announces to its primary (which Sentinels learn replicas from),
// and diskless syncs without delay.
func (c *chaosRedis) setupSentinelNode(s *redistest.Server) error {
	for _, kv := range [][2]string{
		{"replica-announce-port", strconv.Itoa(relayPort(c.relay[s]))},
		{"repl-diskless-sync-delay", "0"},
	} {
		if _, err := s.Do("CONFIG", "SET", kv[0], kv[1]); err != nil {
			return fmt.Errorf("%s: CONFIG SET %s: %w", s.Addr, kv[0], err)
		}
	}
	return nil
}

// rolePrimary reports whether s says (ROLE) it is a primary.
func rolePrimary(s *redistest.Server) (bool, error) {
	v, err := s.Do("ROLE")
	if err != nil {
		return false, err
	}
	f, _ := v.([]any)
	if len(f) == 0 {
		return false, fmt.Errorf("%s: ROLE answered %v", s.Addr, v)
	}
	return f[0] == "master", nil
}

// sentinelFailover asks the Sentinels, in turn, for SENTINEL FAILOVER,
// for up to 5 s (one may not yet hold the replica good to promote); a
// failover already under way (INPROG) will promote it too.
func (c *chaosRedis) sentinelFailover() error {
	deadline := time.Now().Add(5 * time.Second)
	for k := 0; ; k++ {
		_, err := c.sentinels[k%len(c.sentinels)].Do("SENTINEL", "FAILOVER", c.master)
		var re *redistest.ReplyError
		if err == nil || errors.As(err, &re) && strings.HasPrefix(re.Error(), "INPROG") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("SENTINEL FAILOVER: %w", err)
		}
		time.Sleep(100 * time.Millisecond) // asking the next Sentinel
	}
}

// promotionSeen returns when a promotion of r, just seen, ends for the
// checker: 200 ms from now on a Cluster (the gateways learn it from the
// MOVED or the closed connection of their next decision); on Sentinel,
// 200 ms after every Sentinel names r (a gateway follows the Sentinel it
// subscribed to, and dials the primary that one names: until all have
// switched, one may still decide on the old primary, which the Sentinels
// leave a primary some 8 s when it runs).
func (c *chaosRedis) promotionSeen(r *redistest.Server) time.Time {
	if !c.sentinel() {
		return time.Now().Add(200 * time.Millisecond)
	}
	want := strconv.Itoa(relayPort(c.relay[r]))
	seen := time.Now()
	deadline := seen.Add(10 * time.Second)
	for _, s := range c.sentinels {
		for time.Now().Before(deadline) {
			v, err := s.Do("SENTINEL", "get-master-addr-by-name", c.master)
			if addr, _ := v.([]any); err == nil && len(addr) == 2 && fmt.Sprint(addr[1]) == want {
				break
			}
			time.Sleep(20 * time.Millisecond) // polling the Sentinels' view
		}
	}
	c.t.Logf("chaos: every Sentinel named %s %v after its promotion was seen", r.Addr, time.Since(seen).Round(time.Millisecond))
	return time.Now().Add(200 * time.Millisecond)
}

// rejoinSentinel restarts s (killed) empty as primary's replica.
func (c *chaosRedis) rejoinSentinel(s, primary *redistest.Server) error {
	s.Restart()
	c.setPaused(s, false)
	if err := c.setup(s); err != nil {
		return err
	}
	_, err := s.Do("REPLICAOF", "127.0.0.1", strconv.Itoa(relayPort(c.relay[primary])))
	return err
}

// checkSentinels fails unless one node is the primary and the other its
// replica through its relay with the link up, and every Sentinel names
// the primary's relay, holds it up, knows the replica (up) and the two
// other Sentinels.
func (c *chaosRedis) checkSentinels(relays map[int64]bool) error {
	p, r, err := c.roles(0)
	if err != nil {
		return err
	}
	v, err := r.Do("INFO", "replication")
	if err != nil {
		return err
	}
	info, _ := v.(string)
	want := relayPort(c.relay[p])
	if !strings.Contains(info, "master_port:"+strconv.Itoa(want)+"\r\n") || !strings.Contains(info, "master_link_status:up") {
		return fmt.Errorf("%s: not replicating %s's relay with the link up", r.Addr, p.Addr)
	}
	for _, s := range c.sentinels {
		v, err := s.Do("SENTINEL", "get-master-addr-by-name", c.master)
		if err != nil {
			return err
		}
		if addr, _ := v.([]any); len(addr) != 2 || fmt.Sprint(addr[1]) != strconv.Itoa(want) {
			return fmt.Errorf("sentinel %s names %v, not %s's relay", s.Addr, v, p.Addr)
		}
		m, err := s.Do("SENTINEL", "MASTER", c.master)
		if err != nil {
			return err
		}
		fields := pairs(m)
		if fields["flags"] != "master" || fields["num-other-sentinels"] != "2" {
			return fmt.Errorf("sentinel %s: primary flags %q, %s other sentinels", s.Addr, fields["flags"], fields["num-other-sentinels"])
		}
		rs, err := s.Do("SENTINEL", "REPLICAS", c.master)
		if err != nil {
			return err
		}
		list, _ := rs.([]any)
		found := false
		for _, x := range list {
			f := pairs(x)
			if port, _ := strconv.Atoi(f["port"]); port == relayPort(c.relay[r]) && relays[int64(port)] {
				found = f["flags"] == "slave"
			}
		}
		if !found {
			return fmt.Errorf("sentinel %s: replica %s not known up", s.Addr, r.Addr)
		}
	}
	return nil
}

// pairs reads a flat reply of names and values (SENTINEL MASTER).
func pairs(v any) map[string]string {
	f, _ := v.([]any)
	out := map[string]string{}
	for i := 0; i+1 < len(f); i += 2 {
		out[fmt.Sprint(f[i])] = fmt.Sprint(f[i+1])
	}
	return out
}
