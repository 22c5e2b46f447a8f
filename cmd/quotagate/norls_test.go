package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/quotagate/quotagate/internal/proctest"
)

// TestBuildWithoutRLS: `-tags norls` builds a gateway that links no Envoy
// types, and refuses a configuration that turns the decision service on.
func TestBuildWithoutRLS(t *testing.T) {
	spec := proctest.Dockerfile
	spec.Flags = append(append([]string{}, spec.Flags...), "-tags=norls")
	lean := proctest.Build(t, spec)
	cfg := configFile(t, `server: {listen: "127.0.0.1:0", admin_listen: "127.0.0.1:0"}
identity: {anonymous: {tier: anonymous}}
tiers: {anonymous: {}}
upstreams: {app: {url: "echo:"}}
routes: [{name: app, method: GET, path: /, upstream: app}]
rls: {listen: "127.0.0.1:0", config_files: [x.yaml]}
`)
	out, err := exec.Command(lean, "validate", "-config", cfg).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "this build has no decision service") {
		t.Fatalf("validate with rls on a norls build: %v\n%s", err, out)
	}
	full, err := os.Stat(proctest.Binary(t))
	if err != nil {
		t.Fatal(err)
	}
	small, err := os.Stat(lean)
	if err != nil {
		t.Fatal(err)
	}
	if small.Size() >= full.Size() {
		t.Errorf("the norls binary (%d bytes) is not smaller than the default (%d bytes)", small.Size(), full.Size())
	}
	t.Logf("binary: %d bytes, %d without the decision service", full.Size(), small.Size())
}
