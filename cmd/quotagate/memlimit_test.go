package main

import (
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/internal/proctest"
)

func envOf(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
}

// small is a cgroup v2 root with a memory limit of 128 MiB.
var small = fstest.MapFS{
	"proc/self/cgroup":         {Data: []byte("0::/\n")},
	"sys/fs/cgroup/memory.max": {Data: []byte("134217728")},
}

func TestMemoryDefaults(t *testing.T) {
	const gib = 1 << 30
	nested := fstest.MapFS{
		"proc/self/cgroup":                           {Data: []byte("0::/kubepods/pod1/ctr\n")},
		"sys/fs/cgroup/kubepods/pod1/ctr/memory.max": {Data: []byte("1073741824\n")},
		"sys/fs/cgroup/memory.max":                   {Data: []byte("max\n")},
	}
	rootOnly := fstest.MapFS{
		"proc/self/cgroup":         {Data: []byte("0::/\n")},
		"sys/fs/cgroup/memory.max": {Data: []byte("2147483648")},
	}
	unlimited := fstest.MapFS{
		"proc/self/cgroup":                    {Data: []byte("0::/user.slice\n")},
		"sys/fs/cgroup/user.slice/memory.max": {Data: []byte("max\n")},
	}
	v1 := fstest.MapFS{ // cgroup v1 only: no hierarchy 0, no memory.max
		"proc/self/cgroup": {Data: []byte("4:memory:/docker/abc\n")},
	}
	v1Limited := fstest.MapFS{ // the memory controller shares a line; the container sees its own cgroup at the root
		"proc/self/cgroup":                           {Data: []byte("12:pids:/docker/abc\n5:cpu,memory:/docker/abc\n")},
		"sys/fs/cgroup/memory/memory.limit_in_bytes": {Data: []byte("1073741824\n")},
	}
	v1Own := fstest.MapFS{
		"proc/self/cgroup": {Data: []byte("4:memory:/docker/abc\n")},
		"sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes": {Data: []byte("2147483648\n")},
		"sys/fs/cgroup/memory/memory.limit_in_bytes":            {Data: []byte("9223372036854771712\n")},
	}
	v1Unlimited := fstest.MapFS{
		"proc/self/cgroup":                           {Data: []byte("4:memory:/process_api/x\n")},
		"sys/fs/cgroup/memory/memory.limit_in_bytes": {Data: []byte("9223372036854771712\n")},
	}
	for _, tc := range []struct {
		name      string
		root      fstest.MapFS
		env       map[string]string
		limit     int64
		gogc      int
		whyPrefix string
		floor     int64
	}{
		{"container limit", nested, nil, gib / 100 * 90, 200, "90% of /sys/fs/cgroup/kubepods/pod1/ctr/memory.max (1073741824 bytes)", 64 << 20},
		{"root cgroup limit", rootOnly, nil, 2 * gib / 100 * 90, 200, "90% of /sys/fs/cgroup/memory.max", 64 << 20},
		{"GOMEMLIMIT set: only GOGC", nested, map[string]string{"GOMEMLIMIT": "500MiB"}, 0, 200, "", 64 << 20},
		{"GOGC set: only the limit", nested, map[string]string{"GOGC": "50"}, gib / 100 * 90, 0, "90%", 0},
		{"both set", nested, map[string]string{"GOGC": "50", "GOMEMLIMIT": "1GiB"}, 0, 0, "", 0},
		{"unlimited cgroup", unlimited, nil, 0, 0, "", 64 << 20},
		{"cgroup v1 without a limit file", v1, nil, 0, 0, "", 64 << 20},
		{"cgroup v1 limit at the root", v1Limited, nil, gib / 100 * 90, 200, "90% of /sys/fs/cgroup/memory/memory.limit_in_bytes (1073741824 bytes)", 64 << 20},
		{"cgroup v1 own cgroup first", v1Own, nil, 2 * gib / 100 * 90, 200, "90% of /sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", 64 << 20},
		{"cgroup v1 unlimited", v1Unlimited, nil, 0, 0, "", 64 << 20},
		{"no cgroup at all", fstest.MapFS{}, nil, 0, 0, "", 64 << 20},
		{"small limit caps the floor", small, nil, 128 << 20 / 100 * 90, 200, "90%", 128 << 20 / 100 * 90 / 4},
		// GOGC off (GOGC=off) is the user's choice too.
		{"GOGC=off kept", rootOnly, map[string]string{"GOGC": "off"}, 2 * gib / 100 * 90, 0, "90%", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := memoryDefaults(tc.root, envOf(tc.env), config.DefaultHeapFloorBytes)
			if err != nil {
				t.Fatal(err)
			}
			if d.limit != tc.limit || d.gogc != tc.gogc || !strings.HasPrefix(d.why, tc.whyPrefix) || d.floor != tc.floor {
				t.Errorf("got limit %d gogc %d why %q floor %d; want %d, %d, %q..., %d", d.limit, d.gogc, d.why, d.floor, tc.limit, tc.gogc, tc.whyPrefix, tc.floor)
			}
		})
	}
}

// TestMemoryDefaultsConfiguredFloor: server.heap_floor_bytes sets the
// floor (0: none), still capped at a quarter of a memory limit, and GOGC
// in the environment still turns it off.
func TestMemoryDefaultsConfiguredFloor(t *testing.T) {
	unlimited := fstest.MapFS{}
	for _, tc := range []struct {
		name       string
		root       fstest.MapFS
		env        map[string]string
		set, floor int64
	}{
		{"smaller floor", unlimited, nil, 8 << 20, 8 << 20},
		{"larger floor", unlimited, nil, 1 << 30, 1 << 30},
		{"no floor", unlimited, nil, 0, 0},
		{"capped by the limit", small, nil, 1 << 30, 128 << 20 / 100 * 90 / 4},
		{"GOGC set", unlimited, map[string]string{"GOGC": "100"}, 8 << 20, 0},
	} {
		d, err := memoryDefaults(tc.root, envOf(tc.env), tc.set)
		if err != nil || d.floor != tc.floor {
			t.Errorf("%s: floor %d, %v; want %d", tc.name, d.floor, err, tc.floor)
		}
	}
}

func TestMemoryDefaultsBadFile(t *testing.T) {
	for _, content := range []string{"lots", "-5", "0", "12.5"} {
		root := fstest.MapFS{
			"proc/self/cgroup":         {Data: []byte("0::/\n")},
			"sys/fs/cgroup/memory.max": {Data: []byte(content)},
		}
		d, err := memoryDefaults(root, envOf(nil), config.DefaultHeapFloorBytes)
		if err == nil || !strings.Contains(err.Error(), "/sys/fs/cgroup/memory.max") || d != (memDefaults{}) {
			t.Errorf("memory.max %q: %+v, %v; want an error naming the file and no change", content, d, err)
		}
	}
	// A cgroup path cannot climb out of /sys/fs/cgroup.
	root := fstest.MapFS{
		"proc/self/cgroup":         {Data: []byte("0::/../../../etc\n")},
		"etc/memory.max":           {Data: []byte("1")},
		"sys/fs/cgroup/memory.max": {Data: []byte("max")},
	}
	if d, err := memoryDefaults(root, envOf(nil), config.DefaultHeapFloorBytes); err != nil || d != (memDefaults{floor: config.DefaultHeapFloorBytes}) {
		t.Errorf("escaping path: %+v, %v; want no limit and the floor", d, err)
	}
}

// TestBinaryHeapFloor: without GOGC in its environment the gateway's next
// collection waits for the heap floor it logs (server.heap_floor_bytes,
// 64 MiB by default), at most a quarter of a GOMEMLIMIT; with GOGC set it
// keeps Go's own target, far below.
func TestBinaryHeapFloor(t *testing.T) {
	const cfg = `server: {listen: "127.0.0.1:0", admin_listen: "127.0.0.1:0", pprof: true}
identity: {anonymous: {tier: anonymous}}
tiers: {anonymous: {}}
upstreams: {echo: {url: "echo:"}}
routes: [{name: echo, method: GET, path: /, upstream: echo}]
`
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOGC=") && !strings.HasPrefix(kv, "GOMEMLIMIT=") {
			env = append(env, kv)
		}
	}
	startWith := func(cfg string, extra ...string) *proctest.Proc {
		p := proctest.Start(t, proctest.Binary(t), proctest.Options{
			Args: []string{"-config", configFile(t, cfg)},
			Env:  append(slices.Clone(env), extra...),
		})
		p.WaitReady(0)
		return p
	}
	start := func(extra ...string) *proctest.Proc { return startWith(cfg, extra...) }
	nextGC := func(p *proctest.Proc) int64 {
		t.Helper()
		resp, err := http.Get(p.AdminURL() + "/debug/pprof/heap?debug=1")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		m := regexp.MustCompile(`# NextGC = (\d+)`).FindSubmatch(b)
		if resp.StatusCode != http.StatusOK || m == nil {
			t.Fatalf("heap profile: %d, no NextGC in %.200q", resp.StatusCode, b)
		}
		n, _ := strconv.ParseInt(string(m[1]), 10, 64)
		return n
	}
	floored := start()
	line, ok := floored.Logs.WaitLine("runtime memory defaults", proctest.StartTimeout)
	if !ok {
		t.Fatalf("no runtime memory defaults line:\n%s", floored.Logs.Tail(20))
	}
	m := regexp.MustCompile(`"heap_floor":(\d+)`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("no heap_floor in %s", line)
	}
	floor, _ := strconv.ParseInt(m[1], 10, 64)
	if floor < 16<<20 {
		t.Fatalf("heap floor %d, want at least 16 MiB", floor)
	}
	if n := nextGC(floored); n < floor {
		t.Errorf("next collection at %d bytes, below the floor %d", n, floor)
	}
	// A GOMEMLIMIT from the environment caps the floor at a quarter of it.
	limited := start("GOMEMLIMIT=67108864")
	if line, ok := limited.Logs.WaitLine("runtime memory defaults", proctest.StartTimeout); !ok || !strings.Contains(line, `"heap_floor":16777216`) {
		t.Errorf("with GOMEMLIMIT=64MiB: %q, want a heap floor of 16 MiB", line)
	}
	// server.heap_floor_bytes sets it.
	set := startWith(strings.Replace(cfg, "pprof: true}", "pprof: true, heap_floor_bytes: 8388608}", 1))
	if line, ok := set.Logs.WaitLine("runtime memory defaults", proctest.StartTimeout); !ok || !strings.Contains(line, `"heap_floor":8388608`) {
		t.Errorf("with server.heap_floor_bytes: 8388608: %q, want a heap floor of 8 MiB", line)
	}
	plain := start("GOGC=100")
	if n := nextGC(plain); n >= floor {
		t.Errorf("with GOGC=100 the next collection is at %d bytes, want Go's own target below %d", n, floor)
	}
	if plain.Logs.Count("heap_floor") != 0 {
		t.Errorf("with GOGC set a heap floor was logged:\n%s", plain.Logs.Tail(10))
	}
}
