package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Topologies of the fleet mode.
const (
	topoStandalone = "standalone" // one redis-server
	topoCluster    = "cluster"    // a Redis Cluster of clusterPrimaries primaries
)

// clusterPrimaries is the size of the Cluster the fleet mode starts.
const clusterPrimaries = 3

// redisNodes is the Redis a fleet run decides on: a standalone server or
// the primaries of a Cluster, each with a plain client of the bench's own
// for INFO and FLUSHALL.
type redisNodes struct {
	topology string
	addrs    []string        // what the gateways are configured with
	nodes    []*redis.Client // one per server holding data (Cluster: primaries)
	version  string
}

func (r *redisNodes) close() {
	for _, c := range r.nodes {
		_ = c.Close()
	}
}

// startNodes starts the servers of topology, files under dir.
func startNodes(ctx context.Context, ps *procs, dir, topology string) (*redisNodes, error) {
	n, cluster := 1, topology == topoCluster
	if cluster {
		n = clusterPrimaries
	}
	servers := make([]*redisServer, n)
	r := &redisNodes{topology: topology}
	for i := range servers {
		d := filepath.Join(dir, fmt.Sprintf("%s-%d", topology, i))
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
		s, err := startRedis(ctx, ps, d, cluster)
		if err != nil {
			r.close()
			return nil, err
		}
		servers[i] = s
		r.addrs = append(r.addrs, s.addr)
		r.nodes = append(r.nodes, s.client)
	}
	r.version = servers[0].version(ctx)
	if cluster {
		if err := formCluster(ctx, servers); err != nil {
			r.close()
			return nil, err
		}
	}
	return r, nil
}

// formCluster gives each server an equal contiguous range of the 16384
// slots and a distinct epoch, introduces them to each other and waits until
// every one reports cluster_state:ok and knows all the others.
func formCluster(ctx context.Context, servers []*redisServer) error {
	const slots = 16384
	n := len(servers)
	for i, s := range servers {
		lo, hi := i*slots/n, (i+1)*slots/n-1
		if err := s.client.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			return fmt.Errorf("%s: CLUSTER ADDSLOTSRANGE: %w", s.addr, err)
		}
		if err := s.client.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err(); err != nil {
			return fmt.Errorf("%s: CLUSTER SET-CONFIG-EPOCH: %w", s.addr, err)
		}
	}
	for i, s := range servers {
		for _, o := range servers[i+1:] {
			_, port, _ := strings.Cut(o.addr, ":")
			if err := s.client.Do(ctx, "CLUSTER", "MEET", "127.0.0.1", port, o.busPort).Err(); err != nil {
				return fmt.Errorf("%s: CLUSTER MEET %s: %w", s.addr, o.addr, err)
			}
		}
	}
	want := "cluster_known_nodes:" + strconv.Itoa(n)
	deadline := time.Now().Add(20 * time.Second)
	for {
		var notReady error
		for _, s := range servers {
			info, err := s.client.ClusterInfo(ctx).Result()
			if err != nil {
				return fmt.Errorf("%s: CLUSTER INFO: %w", s.addr, err)
			}
			if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, want) {
				notReady = fmt.Errorf("%s: cluster not ready:\n%s", s.addr, info)
				break
			}
		}
		if notReady == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return notReady
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// connectNodes uses a Redis the caller runs: one standalone address, or
// the seed addresses of a Cluster, whose primaries it looks up.
func connectNodes(ctx context.Context, topology string, addrs []string) (*redisNodes, error) {
	r := &redisNodes{topology: topology, addrs: addrs}
	if topology == topoStandalone {
		c := redis.NewClient(&redis.Options{Addr: addrs[0], DialTimeout: time.Second})
		r.nodes = []*redis.Client{c}
	} else {
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, DialTimeout: time.Second})
		defer cc.Close()
		var mu sync.Mutex // ForEachMaster calls concurrently
		var primaries []string
		err := cc.ForEachMaster(ctx, func(_ context.Context, c *redis.Client) error {
			mu.Lock()
			primaries = append(primaries, c.Options().Addr)
			mu.Unlock()
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("finding the Cluster's primaries: %w", err)
		}
		slices.Sort(primaries)
		for _, a := range primaries {
			r.nodes = append(r.nodes, redis.NewClient(&redis.Options{Addr: a, DialTimeout: time.Second}))
		}
	}
	for _, c := range r.nodes {
		if err := c.Ping(ctx).Err(); err != nil {
			r.close()
			return nil, fmt.Errorf("%s: PING: %w", c.Options().Addr, err)
		}
	}
	r.version = (&redisServer{client: r.nodes[0]}).version(ctx)
	return r, nil
}

// flush empties every node.
func (r *redisNodes) flush(ctx context.Context) error {
	for _, c := range r.nodes {
		if err := c.FlushAll(ctx).Err(); err != nil {
			return fmt.Errorf("%s: FLUSHALL: %w", c.Options().Addr, err)
		}
	}
	return nil
}

// redisStats is what INFO reports, summed over the nodes.
type redisStats struct {
	cmds       cmdCounts
	cpuSeconds float64 // used_cpu_sys + used_cpu_user
	// netBytes is total_net_input_bytes + total_net_output_bytes (INFO
	// stats): every byte clients sent and received.
	netBytes int64
}

// stats reads INFO commandstats and cpu of every node and sums them.
func (r *redisNodes) stats(ctx context.Context) (redisStats, error) {
	sum := redisStats{cmds: cmdCounts{}}
	for _, c := range r.nodes {
		s, err := c.Info(ctx, "commandstats", "cpu", "stats").Result()
		if err != nil {
			return sum, fmt.Errorf("%s: INFO: %w", c.Options().Addr, err)
		}
		one, err := parseInfoStats(s)
		if err != nil {
			return sum, fmt.Errorf("%s: %w", c.Options().Addr, err)
		}
		for k, v := range one.cmds {
			sum.cmds[k] += v
		}
		sum.cpuSeconds += one.cpuSeconds
		sum.netBytes += one.netBytes
	}
	return sum, nil
}

// parseInfoStats parses the sections stats reads from one node.
func parseInfoStats(s string) (redisStats, error) {
	cmds, err := parseCommandStats(s)
	if err != nil {
		return redisStats{}, err
	}
	out := redisStats{cmds: cmds}
	fields := 0
	for _, line := range strings.Split(s, "\n") {
		name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (name == "total_net_input_bytes" || name == "total_net_output_bytes") {
			b, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return out, fmt.Errorf("INFO stats: %s: %w", name, err)
			}
			out.netBytes += b
			continue
		}
		if !ok || (name != "used_cpu_sys" && name != "used_cpu_user") {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return out, fmt.Errorf("INFO cpu: %s: %w", name, err)
		}
		out.cpuSeconds += f
		fields++
	}
	if fields != 2 {
		return out, errors.New("INFO cpu: used_cpu_sys or used_cpu_user missing")
	}
	return out, nil
}

// bytesPerKey is the mean MEMORY USAGE of up to sample live keys of
// callers per node (key, value and its entry in the keyspace; not the
// entry in the expiry table); keys of no caller, such as the fleet
// roster, are left out. 0 when no caller's key is live.
//
// A used_memory delta over a run cannot measure it: a token bucket's key
// expires once the bucket is full again, a tenth of a second after a free
// caller's single request, so few keys are live at any instant and the
// delta is allocator noise.
func (r *redisNodes) bytesPerKey(ctx context.Context, sample int) (float64, error) {
	var total, n int64
	for _, c := range r.nodes {
		var cursor uint64
		var keys []string
		for len(keys) < sample {
			batch, next, err := c.Scan(ctx, cursor, "*{t:*", 1000).Result()
			if err != nil {
				return 0, fmt.Errorf("%s: SCAN: %w", c.Options().Addr, err)
			}
			keys = append(keys, batch...)
			if cursor = next; cursor == 0 {
				break
			}
		}
		if len(keys) > sample {
			keys = keys[:sample]
		}
		for _, k := range keys {
			b, err := c.MemoryUsage(ctx, k, 0).Result()
			if errors.Is(err, redis.Nil) { // expired since the scan
				continue
			}
			if err != nil {
				return 0, fmt.Errorf("%s: MEMORY USAGE: %w", c.Options().Addr, err)
			}
			total += b
			n++
		}
	}
	if n == 0 {
		return 0, nil
	}
	return float64(total) / float64(n), nil
}
