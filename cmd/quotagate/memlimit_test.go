package main

import (
	"strings"
	"testing"
	"testing/fstest"
)

func envOf(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
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
	}{
		{"container limit", nested, nil, gib / 100 * 90, 200, "90% of /sys/fs/cgroup/kubepods/pod1/ctr/memory.max (1073741824 bytes)"},
		{"root cgroup limit", rootOnly, nil, 2 * gib / 100 * 90, 200, "90% of /sys/fs/cgroup/memory.max"},
		{"GOMEMLIMIT set: only GOGC", nested, map[string]string{"GOMEMLIMIT": "500MiB"}, 0, 200, ""},
		{"GOGC set: only the limit", nested, map[string]string{"GOGC": "50"}, gib / 100 * 90, 0, "90%"},
		{"both set", nested, map[string]string{"GOGC": "50", "GOMEMLIMIT": "1GiB"}, 0, 0, ""},
		{"unlimited cgroup", unlimited, nil, 0, 0, ""},
		{"cgroup v1 without a limit file", v1, nil, 0, 0, ""},
		{"cgroup v1 limit at the root", v1Limited, nil, gib / 100 * 90, 200, "90% of /sys/fs/cgroup/memory/memory.limit_in_bytes (1073741824 bytes)"},
		{"cgroup v1 own cgroup first", v1Own, nil, 2 * gib / 100 * 90, 200, "90% of /sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes"},
		{"cgroup v1 unlimited", v1Unlimited, nil, 0, 0, ""},
		{"no cgroup at all", fstest.MapFS{}, nil, 0, 0, ""},
		// GOGC off (GOGC=off) is the user's choice too.
		{"GOGC=off kept", rootOnly, map[string]string{"GOGC": "off"}, 2 * gib / 100 * 90, 0, "90%"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := memoryDefaults(tc.root, envOf(tc.env))
			if err != nil {
				t.Fatal(err)
			}
			if d.limit != tc.limit || d.gogc != tc.gogc || !strings.HasPrefix(d.why, tc.whyPrefix) {
				t.Errorf("got limit %d gogc %d why %q; want %d, %d, %q...", d.limit, d.gogc, d.why, tc.limit, tc.gogc, tc.whyPrefix)
			}
		})
	}
}

func TestMemoryDefaultsBadFile(t *testing.T) {
	for _, content := range []string{"lots", "-5", "0", "12.5"} {
		root := fstest.MapFS{
			"proc/self/cgroup":         {Data: []byte("0::/\n")},
			"sys/fs/cgroup/memory.max": {Data: []byte(content)},
		}
		d, err := memoryDefaults(root, envOf(nil))
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
	if d, err := memoryDefaults(root, envOf(nil)); err != nil || d != (memDefaults{}) {
		t.Errorf("escaping path: %+v, %v", d, err)
	}
}
