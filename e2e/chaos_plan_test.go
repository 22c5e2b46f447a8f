package e2e

import (
	"flag"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// What TestChaos runs: the topologies, the seeds and the traffic time,
// from flags or the environment.

var (
	chaosSeeds    = flag.String("chaos.seeds", "", "comma-separated seeds of TestChaos (default 1,2; env QUOTAGATE_CHAOS_SEEDS)")
	chaosDuration = flag.Duration("chaos.duration", 0, "traffic time per seed of TestChaos (default 20s; env QUOTAGATE_CHAOS_DURATION)")
	chaosTopo     = flag.String("chaos.topology", "", "comma-separated topologies of TestChaos: cluster, sentinel, regions (default cluster; env QUOTAGATE_CHAOS_TOPOLOGY)")
)

// chaosTopology is a shape of the chaos run's store: how many slot
// ranges (primaries), the faults its schedules draw, and how its Redis
// starts.
type chaosTopology struct {
	name string
	// ranges are the slot ranges (primaries); on regions, the regions.
	ranges int
	kinds  []chaosKind
	start  func(t testing.TB) chaosBackend
}

var (
	chaosCluster = chaosTopology{name: "cluster", ranges: chaosRanges, kinds: clusterKinds,
		start: func(t testing.TB) chaosBackend { return startChaosRedis(t, chaosRanges) }}
	chaosSentinel = chaosTopology{name: "sentinel", ranges: 1, kinds: sentinelKinds,
		start: func(t testing.TB) chaosBackend { return startChaosSentinel(t) }}
	chaosRegionsTopo = chaosTopology{name: "regions", ranges: chaosRegionCount, kinds: regionsKinds, start: startChaosRegions}
	chaosTopologies  = []chaosTopology{chaosCluster, chaosSentinel, chaosRegionsTopo}
)

// chaosPlanned is one topology's seeds of a TestChaos run.
type chaosPlanned struct {
	topo  chaosTopology
	seeds []uint64
}

// chaosPlan returns what TestChaos runs, and the traffic time per seed.
// With neither topologies nor seeds given it is the short schedule:
// seeds 1 and 2 on the Cluster, seed 1 on Sentinel and on regions. Seeds given without
// topologies run on the Cluster (as before Sentinel was a topology);
// topologies given without seeds run seeds 1 and 2 each.
func chaosPlan(t *testing.T) ([]chaosPlanned, time.Duration) {
	topos := *chaosTopo
	if topos == "" {
		topos = os.Getenv("QUOTAGATE_CHAOS_TOPOLOGY")
	}
	seeds := *chaosSeeds
	if seeds == "" {
		seeds = os.Getenv("QUOTAGATE_CHAOS_SEEDS")
	}
	d := *chaosDuration
	if d == 0 {
		if v := os.Getenv("QUOTAGATE_CHAOS_DURATION"); v != "" {
			var err error
			if d, err = time.ParseDuration(v); err != nil {
				t.Fatalf("chaos: QUOTAGATE_CHAOS_DURATION: %v", err)
			}
		}
	}
	if d == 0 {
		d = 20 * time.Second
	}
	if topos == "" && seeds == "" {
		return []chaosPlanned{{chaosCluster, []uint64{1, 2}}, {chaosSentinel, []uint64{1}}, {chaosRegionsTopo, []uint64{1}}}, d
	}
	if topos == "" {
		topos = chaosCluster.name
	}
	if seeds == "" {
		seeds = "1,2"
	}
	list := parseSeeds(t, seeds)
	var out []chaosPlanned
	for _, name := range strings.Split(topos, ",") {
		name = strings.TrimSpace(name)
		i := slices.IndexFunc(chaosTopologies, func(c chaosTopology) bool { return c.name == name })
		if i < 0 {
			t.Fatalf("chaos: unknown topology %q", name)
		}
		out = append(out, chaosPlanned{chaosTopologies[i], list})
	}
	return out, d
}

// parseSeeds reads a list of seeds and ranges: 1,4,10-12.
func parseSeeds(t *testing.T, seeds string) []uint64 {
	var out []uint64
	for _, s := range strings.Split(seeds, ",") {
		s = strings.TrimSpace(s)
		if lo, hi, ok := strings.Cut(s, "-"); ok { // a range: 1-20
			a, err1 := strconv.ParseUint(lo, 10, 64)
			b, err2 := strconv.ParseUint(hi, 10, 64)
			if err1 != nil || err2 != nil || b < a {
				t.Fatalf("chaos: seed range %q", s)
			}
			for n := a; n <= b; n++ {
				out = append(out, n)
			}
			continue
		}
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("chaos: seed %q: %v", s, err)
		}
		out = append(out, n)
	}
	return out
}
