package main

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/rls"
)

// exampleBase is what a `yaml fragment` block of the docs is merged into:
// a valid configuration with the names the docs' fragments lean on (the
// tiers free, pro, enterprise and anonymous; a policy tenant; the
// upstreams api and llm; one route). A fragment's keys replace or extend
// it, mapping by mapping.
const exampleBase = `
identity:
  anonymous: {tier: anonymous}
  api_keys:
    - {key_sha256: 5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8, tenant: acme, tier: free}
tiers:
  anonymous: {}
  free: {}
  pro: {}
  enterprise: {}
policies:
  tenant:
    limits:
      "*": {rate: 10, per: 1s, burst: 100000}
  llm-tokens:
    limits:
      "*": {rate: 40000, per: 1m, burst: 40000}
upstreams:
  api: {url: "http://127.0.0.1:9"}
  llm: {url: "http://127.0.0.1:9"}
routes:
  - {name: base, method: GET, path: "/{rest...}", upstream: api, policies: [tenant]}
`

// docFiles are the Markdown files whose examples are checked: README.md
// and every page under docs/.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"../../README.md"}
	err := filepath.WalkDir("../../docs", func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			files = append(files, path)
		}
		return err
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return files
}

// yamlBlock is one fenced ```yaml block of a Markdown file.
type yamlBlock struct {
	file string
	line int    // of the opening fence
	kind string // the info string's word after "yaml"
	text string
}

// yamlBlocks returns the ```yaml blocks of file.
func yamlBlocks(t *testing.T, file string) []yamlBlock {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []yamlBlock
	var cur *yamlBlock
	var body strings.Builder
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case cur == nil && strings.HasPrefix(trimmed, "```yaml"):
			words := strings.Fields(strings.TrimPrefix(trimmed, "```yaml"))
			cur = &yamlBlock{file: file, line: n}
			if len(words) > 0 {
				cur.kind = words[0]
			}
			body.Reset()
		case cur != nil && strings.HasPrefix(trimmed, "```"):
			cur.text = body.String()
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			body.WriteString(line)
			body.WriteByte('\n')
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// merge returns base with over laid on it: mappings merge key by key, any
// other value of over replaces base's.
func merge(base, over any) any {
	bm, ok1 := base.(map[string]any)
	om, ok2 := over.(map[string]any)
	if !ok1 || !ok2 {
		return over
	}
	out := make(map[string]any, len(bm)+len(om))
	for k, v := range bm {
		out[k] = v
	}
	for k, v := range om {
		out[k] = merge(bm[k], v)
	}
	return out
}

// exampleEnv sets no QUOTAGATE_* override and gives every other variable
// (the secrets an example names) a value.
func exampleEnv(name string) (string, bool) {
	if strings.HasPrefix(name, "QUOTAGATE_") {
		return "", false
	}
	return "example-secret", true
}

// TestDocExamples: every ```yaml block of README.md and docs/ says what it
// is after "yaml" in its info string, and is checked as that:
//
//	config      a whole quotagate configuration: it validates as written
//	fragment    part of one: merged into exampleBase, it validates
//	rls         a decision service descriptor file: the rls parser takes it
//	other       another program's file (Envoy, Kubernetes, Compose, ...):
//	            it is well-formed YAML
//
// A block without one of these words fails: no example escapes the check.
func TestDocExamples(t *testing.T) {
	var base map[string]any
	if err := yaml.Unmarshal([]byte(exampleBase), &base); err != nil {
		t.Fatal(err)
	}
	if _, err := config.Parse([]byte(exampleBase), exampleEnv); err != nil {
		t.Fatalf("exampleBase: %v", err)
	}
	// The PEM files the examples name exist here, with a CA certificate.
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, selfSignedPEM(t), 0o600); err != nil {
		t.Fatal(err)
	}
	files := strings.NewReplacer("/etc/quotagate/redis-ca.pem", ca)
	checked := 0
	for _, file := range docFiles(t) {
		for _, b := range yamlBlocks(t, file) {
			where := fmt.Sprintf("%s:%d", strings.TrimPrefix(b.file, "../../"), b.line)
			b.text = files.Replace(b.text)
			var doc any
			if err := yaml.Unmarshal([]byte(b.text), &doc); err != nil {
				t.Errorf("%s: not YAML: %v", where, err)
				continue
			}
			switch b.kind {
			case "config":
				if _, err := config.Parse([]byte(b.text), exampleEnv); err != nil {
					t.Errorf("%s: the config does not validate:\n%v", where, err)
				}
			case "fragment":
				merged, err := yaml.Marshal(merge(base, doc))
				if err != nil {
					t.Fatal(err)
				}
				if _, err := config.Parse(merged, exampleEnv); err != nil {
					t.Errorf("%s: the fragment, merged into the example base, does not validate:\n%v", where, err)
				}
			case "rls":
				if _, err := rls.ParseFile(where, []byte(b.text)); err != nil {
					t.Errorf("%s: the descriptor file does not parse:\n%v", where, err)
				}
			case "other":
			default:
				t.Errorf("%s: a ```yaml block must say what it is (```yaml config, fragment, rls or other), got %q", where, b.kind)
				continue
			}
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("no yaml example found in README.md or docs/")
	}
}

// selfSignedPEM returns a self-signed CA certificate in PEM.
func selfSignedPEM(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "example CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
