// Package deploy checks quotagate's deployment files (Dockerfile,
// .dockerignore, docker-compose.yml and the configs under deploy/) without a
// Docker engine: the binary is built with exactly the Dockerfile's go build
// command and checked to be static, the compose file is read and its
// services, health checks, mounts and dependencies cross-checked, and every
// config the compose file mounts is validated with the environment the
// compose file and the image set.
package deploy

import (
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/proctest"
)

// repoRoot is the repository root: the Docker build context, and the
// directory docker compose resolves relative paths against.
var repoRoot = func() string {
	abs, err := filepath.Abs("..")
	if err != nil {
		panic(err) // only when the working directory is gone
	}
	return abs
}()

// repoPath returns the path of a file given relative to the repository
// root.
func repoPath(rel string) string { return filepath.Join(repoRoot, filepath.FromSlash(rel)) }

// testVersion is what the test passes for the Dockerfile's VERSION.
const testVersion = "v0.0.0-deploytest"

func TestMain(m *testing.M) { os.Exit(proctest.Main(m)) }

// dockerBuiltBinary runs the Dockerfile's `go build` command once, as the
// image build would (with this machine's GOOS and GOARCH as the target
// platform and VERSION=testVersion), but writing the binary to a temporary
// directory. It returns the binary's path.
func dockerBuiltBinary(t *testing.T) string {
	t.Helper()
	s := readImageSpec(t)
	vars := map[string]string{"TARGETOS": runtime.GOOS, "TARGETARCH": runtime.GOARCH, "VERSION": testVersion}
	var unknown []string
	expand := func(w string) string {
		return os.Expand(w, func(name string) string {
			v, ok := vars[name]
			if !ok {
				unknown = append(unknown, name)
			}
			return v
		})
	}
	var spec proctest.Spec
	for i := 0; i < len(s.buildArgs); i++ {
		a := expand(s.buildArgs[i])
		switch {
		case a == "-o" && i+1 < len(s.buildArgs):
			i++ // the harness writes to a directory of its own
		case i == len(s.buildArgs)-1 && !strings.HasPrefix(a, "-"):
			spec.Package = a
		default:
			spec.Flags = append(spec.Flags, a)
		}
	}
	for k, v := range s.buildEnv {
		spec.Env = append(spec.Env, k+"="+expand(v))
	}
	slices.Sort(spec.Env) // one spec, one build, whatever the map's order
	if len(unknown) > 0 {
		t.Fatalf("Dockerfile go build uses variables the test does not know: %q", unknown)
	}
	if spec.Package == "" {
		t.Fatalf("Dockerfile go build %q names no package last", s.buildArgs)
	}
	return proctest.Build(t, spec)
}

func TestBinaryIsStatic(t *testing.T) {
	bin := dockerBuiltBinary(t)
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("program header %v: the binary is dynamically linked; distroless/static has no libc", p.Type)
		}
	}
	if sec := f.Section(".dynamic"); sec != nil {
		t.Error("the binary has a .dynamic section")
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the binary needs shared libraries %q", libs)
	}
	// -s strips the symbol table.
	if sec := f.Section(".symtab"); sec != nil {
		t.Error("the binary has a .symtab section: -ldflags -s did not apply")
	}
	// -trimpath leaves no path of the build machine in the binary.
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(data, []byte(repoRoot+string(filepath.Separator))) {
		t.Errorf("the binary contains the build directory %s: -trimpath did not apply", repoRoot)
	}
}

func TestBinaryVersion(t *testing.T) {
	out, err := exec.Command(dockerBuiltBinary(t), "version").CombinedOutput()
	if err != nil {
		t.Fatalf("quotagate version: %v\n%s", err, out)
	}
	if got, want := strings.TrimSpace(string(out)), "quotagate "+testVersion; got != want {
		t.Errorf("quotagate version = %q, want %q (set with -X main.version)", got, want)
	}
}

// TestImageHealthcheck runs the image's binary as the image would (its
// default config, its ENV) on free ports, and the HEALTHCHECK command
// against it: the command fails while nothing listens and succeeds once the
// gateway is ready.
func TestImageHealthcheck(t *testing.T) {
	s := readImageSpec(t)
	bin := dockerBuiltBinary(t)

	hc := slices.Clone(s.healthcheck)
	hc[0] = bin
	i := slices.Index(hc, "-url")
	u := healthcheckURL(t, hc)
	probe := func(ctx context.Context, admin string) error {
		u.Host = admin
		hc[i+1] = u.String()
		out, err := exec.CommandContext(ctx, hc[0], hc[1:]...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	}

	// Nothing listens on a port this test holds open without serving.
	idle, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	go func() {
		for {
			c, err := idle.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	if err := probe(t.Context(), idle.Addr().String()); err == nil {
		t.Fatal("the healthcheck succeeded with no gateway answering")
	}

	// The image's ENV, with its listeners moved to port 0 on loopback.
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	for k, v := range s.env {
		switch k {
		case "QUOTAGATE_SERVER_LISTEN", "QUOTAGATE_SERVER_ADMIN_LISTEN":
			v = "127.0.0.1:0"
		}
		env = append(env, k+"="+v)
	}
	gw := proctest.Start(t, bin, proctest.Options{Name: "image", Args: []string{"-config", repoPath(s.copies[s.configPath])}, Env: env})

	// The image listens where its ENV says, not where config.yaml does.
	if _, port, _ := net.SplitHostPort(gw.Listen); port == "8080" || port == "0" {
		t.Errorf("gateway listener %s: want the port ENV's port 0 picked", gw.Listen)
	}

	// Probe as Docker does, until the gateway is ready.
	deadline := time.Now().Add(proctest.StartTimeout)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		err := probe(ctx, gw.AdminListen)
		cancel()
		if err == nil {
			break
		}
		if gw.Exited() {
			t.Fatalf("the gateway exited (%v) before it was healthy", gw.ExitErr())
		}
		if time.Now().After(deadline) {
			proctest.FatalOverrun(t, "healthcheck never succeeded within %v: %v", proctest.StartTimeout, err)
		}
		time.Sleep(50 * time.Millisecond) // polling a separate process, as Docker's interval does
	}

	// docker stop sends SIGTERM: the gateway exits 0.
	gw.Signal(syscall.SIGTERM)
	if err := gw.Wait(15 * time.Second); err != nil {
		t.Errorf("gateway exit after SIGTERM: %v", err)
	}
}

// hostPort splits a URL's host into host and port, with the scheme's
// default port when none is written.
func hostPort(u *url.URL) (string, string) {
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	return u.Hostname(), port
}
