package opscheck

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// configMapVolume is a directory laid out as the kubelet lays out a
// ConfigMap volume (its atomic writer): the files live in a timestamped
// directory, "..data" is a symlink to it, and each key is a symlink
// "key -> ..data/key". An update writes a new timestamped directory,
// points "..data_tmp" at it, renames "..data_tmp" over "..data" (one
// atomic rename) and removes the old directory. The key's own symlink never
// changes.
type configMapVolume struct {
	dir string
	gen int
}

func newConfigMapVolume(t *testing.T, files map[string][]byte) *configMapVolume {
	t.Helper()
	v := &configMapVolume{dir: t.TempDir()}
	cur := v.writeGeneration(t, files)
	if err := os.Symlink(cur, filepath.Join(v.dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for key := range files {
		if err := os.Symlink(filepath.Join("..data", key), filepath.Join(v.dir, key)); err != nil {
			t.Fatal(err)
		}
	}
	return v
}

// writeGeneration writes files into a new timestamped directory and returns
// its name (relative to v.dir, as the kubelet's symlink is).
func (v *configMapVolume) writeGeneration(t *testing.T, files map[string][]byte) string {
	t.Helper()
	v.gen++
	name := fmt.Sprintf("..2026_11_30_12_00_%02d.%09d", v.gen, v.gen)
	if err := os.Mkdir(filepath.Join(v.dir, name), 0o755); err != nil {
		t.Fatal(err)
	}
	for key, b := range files {
		if err := os.WriteFile(filepath.Join(v.dir, name, key), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return name
}

// update replaces the volume's content the way the kubelet does.
func (v *configMapVolume) update(t *testing.T, files map[string][]byte) {
	t.Helper()
	old, err := os.Readlink(filepath.Join(v.dir, "..data"))
	if err != nil {
		t.Fatal(err)
	}
	next := v.writeGeneration(t, files)
	tmp := filepath.Join(v.dir, "..data_tmp")
	if err := os.Symlink(next, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(v.dir, old)); err != nil {
		t.Fatal(err)
	}
}

// TestConfigMapUpdateReloads runs the real gateway, with the base
// Deployment's args, on a config delivered as a ConfigMap volume and
// updates the volume as the kubelet does. The gateway must apply the new
// config without a restart (a renamed policy then answers the 429s and the
// reload is counted ok), and must refuse an invalid update, keeping the
// config in force and counting the error.
func TestConfigMapUpdateReloads(t *testing.T) {
	m := render(t, "deploy/kubernetes/base")
	_, c, _, data, env := gatewayParts(t, m)
	original := string(data)
	// A config whose anonymous callers get a burst of 1 from a policy of
	// another name, so that a 429 says which config decided.
	updated := strings.NewReplacer(
		"  tenant:\n", "  tenant_v2:\n",
		"policies: [tenant]", "policies: [tenant_v2]",
		"anonymous:  {rate: 1,    per: 1s, burst: 5}", "anonymous:  {rate: 1,    per: 1h, burst: 1}",
	).Replace(original)
	if updated == original || !strings.Contains(updated, "tenant_v2:") || !strings.Contains(updated, "burst: 1}") {
		t.Fatal("the base config.yaml no longer has the policy this test renames; update the test")
	}

	vol := newConfigMapVolume(t, map[string][]byte{"config.yaml": data})
	env["QUOTAGATE_SERVER_LISTEN"] = "127.0.0.1:0"
	env["QUOTAGATE_SERVER_ADMIN_LISTEN"] = "127.0.0.1:0"
	var envList []string
	for k, v := range env {
		envList = append(envList, k+"="+v)
	}
	g := startGateway(t, configArgs(c.Args, filepath.Join(vol.dir, "config.yaml")), envList)

	reloads := func(result string) float64 {
		return metricValue(g.scrape(t), "quotagate_config_reloads_total", map[string]string{"result": result})
	}
	livePolicies := func() (map[string]json.RawMessage, error) {
		code, body, err := g.get("/config")
		if err != nil || code != http.StatusOK {
			return nil, fmt.Errorf("GET /config: %d %v", code, err)
		}
		var cfg struct {
			Policies map[string]json.RawMessage `json:"policies"`
		}
		if err := json.Unmarshal([]byte(body), &cfg); err != nil {
			return nil, fmt.Errorf("GET /config: %v", err)
		}
		return cfg.Policies, nil
	}
	if p, err := livePolicies(); err != nil || p["tenant"] == nil {
		t.Fatalf("before the update /config has policies %v (%v), want tenant", keys(p), err)
	}

	vol.update(t, map[string][]byte{"config.yaml": []byte(updated)})
	g.waitFor(t, 30*time.Second, "/config to show the updated ConfigMap", func() (bool, error) {
		p, err := livePolicies()
		return p["tenant_v2"] != nil, err
	})
	if got := reloads("ok"); got != 1 {
		t.Errorf("quotagate_config_reloads_total{result=ok} = %v after one update, want 1", got)
	}
	// The new policy decides: burst 1, so the second request is its 429.
	var last string
	for range 2 {
		code, body, err := httpGet("http://" + g.listen + "/v1/anything")
		if err != nil {
			t.Fatal(err)
		}
		last = fmt.Sprint(code, " ", body)
	}
	if !strings.HasPrefix(last, "429 ") || !strings.Contains(last, `"policy":"tenant_v2"`) {
		t.Errorf("second anonymous request after the update: %s; want a 429 from policy tenant_v2", last)
	}

	// An invalid update is refused and counted; the live config stays.
	vol.update(t, map[string][]byte{"config.yaml": []byte(updated + "\nnot_a_key: 1\n")})
	g.waitFor(t, 30*time.Second, "the invalid update to be counted", func() (bool, error) {
		return reloads("error") == 1, nil
	})
	if p, err := livePolicies(); err != nil || p["tenant_v2"] == nil {
		t.Errorf("after an invalid update /config has policies %v (%v), want tenant_v2 still", keys(p), err)
	}
	if got := reloads("ok"); got != 1 {
		t.Errorf("quotagate_config_reloads_total{result=ok} = %v after an invalid update, want still 1", got)
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
