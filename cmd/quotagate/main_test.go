package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func runCmd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	err := run(context.Background(), args, &out, &errb)
	code = exitCode(err, &errb)
	return code, out.String(), errb.String()
}

func TestValidateShippedConfig(t *testing.T) {
	code, out, errs := runCmd(t, "validate", "-config", "../../config.yaml")
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
}

func TestValidateReportsEveryPlantedMistake(t *testing.T) {
	code, out, _ := runCmd(t, "validate", "-config", "testdata/broken.yaml")
	if code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	for _, want := range []string{
		"policies.tenant.on_store_eror",    // misspelled key
		"policies.tenant.limits.free.rate", // negative rate
		"policies.tenant.limits.gold",      // unknown tier
		"routes[0].upstream",               // dangling upstream
		"routes[0].policies",               // dangling policy
		"identity.api_keys[0].key_sha256",  // malformed key hash
	} {
		if !strings.Contains(out, want) {
			t.Errorf("validate output lacks %q:\n%s", want, out)
		}
	}
}

func TestValidateMissingFile(t *testing.T) {
	if code, _, _ := runCmd(t, "validate", "-config", "testdata/nope.yaml"); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
}

func TestBadFlagsExit1(t *testing.T) {
	if code, _, _ := runCmd(t, "-no-such-flag"); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	if code, _, _ := runCmd(t, "explain", "-config", "../../config.yaml"); code != 1 {
		t.Fatalf("explain without -path: exit %d, want 1", code)
	}
}

func TestExplainTemplatedPath(t *testing.T) {
	code, out, errs := runCmd(t, "explain", "-config", "../../config.yaml", "-method", "POST", "-path", "/v1/transfers/secret-id-123", "-key", "demo-free-key")
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	for _, want := range []string{"transfers.create", "/v1/transfers/{id}", "tenant", "transfers", "{t:"} {
		if !strings.Contains(out, want) {
			t.Errorf("explain output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "secret-id-123") {
		t.Errorf("explain puts a raw path segment in its output:\n%s", out)
	}
}
