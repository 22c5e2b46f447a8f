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
	"sync"
	"syscall"
	"testing"
	"time"
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

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
	buildDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// dockerBuiltBinary runs the Dockerfile's `go build` command once, as the
// image build would (with this machine's GOOS and GOARCH as the target
// platform and VERSION=testVersion), but writing the binary to a temporary
// directory. It returns the binary's path.
func dockerBuiltBinary(t *testing.T) string {
	t.Helper()
	s := readImageSpec(t)
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "quotagate-deploy-")
		if buildErr != nil {
			return
		}
		builtBin = filepath.Join(buildDir, "quotagate")
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
		args := []string{"build"}
		for i := 0; i < len(s.buildArgs); i++ {
			a := expand(s.buildArgs[i])
			if a == "-o" && i+1 < len(s.buildArgs) {
				args = append(args, "-o", builtBin)
				i++
				continue
			}
			args = append(args, a)
		}
		env := os.Environ()
		for k, v := range s.buildEnv {
			env = append(env, k+"="+expand(v))
		}
		if len(unknown) > 0 {
			buildErr = fmt.Errorf("Dockerfile go build uses variables the test does not know: %q", unknown)
			return
		}
		cmd := exec.Command("go", args...)
		cmd.Dir = repoRoot
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtBin
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

// freeAddr returns a 127.0.0.1 address with a port that was free a moment
// ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestImageHealthcheck runs the image's binary as the image would (its
// default config, its ENV) on free ports, and the HEALTHCHECK command
// against it: the command fails while nothing listens and succeeds once the
// gateway is ready.
func TestImageHealthcheck(t *testing.T) {
	s := readImageSpec(t)
	bin := dockerBuiltBinary(t)
	listen, admin := freeAddr(t), freeAddr(t)

	hc := slices.Clone(s.healthcheck)
	hc[0] = bin
	i := slices.Index(hc, "-url")
	u := healthcheckURL(t, hc)
	u.Host = admin
	hc[i+1] = u.String()
	probe := func(ctx context.Context) error {
		out, err := exec.CommandContext(ctx, hc[0], hc[1:]...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	}

	if err := probe(t.Context()); err == nil {
		t.Fatal("the healthcheck succeeded with no gateway running")
	}

	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	for k, v := range s.env {
		switch k {
		case "QUOTAGATE_SERVER_LISTEN":
			v = listen
		case "QUOTAGATE_SERVER_ADMIN_LISTEN":
			v = admin
		}
		env = append(env, k+"="+v)
	}
	var logs bytes.Buffer
	gw := exec.Command(bin, "-config", repoPath(s.copies[s.configPath]))
	gw.Env = env
	gw.Stdout, gw.Stderr = &logs, &logs
	if err := gw.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- gw.Wait() }()
	defer func() {
		_ = gw.Process.Kill()
		<-exited
	}()

	// Probe as Docker does, until the gateway is ready.
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		err := probe(ctx)
		cancel()
		if err == nil {
			break
		}
		select {
		case werr := <-exited:
			exited <- werr
			t.Fatalf("the gateway exited (%v) before it was healthy; logs:\n%s", werr, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("healthcheck never succeeded: %v; logs:\n%s", err, logs.String())
		}
		time.Sleep(50 * time.Millisecond) // polling a separate process, as Docker's interval does
	}

	// The image listens where its ENV says, not where config.yaml does.
	if _, err := (&net.Dialer{Timeout: time.Second}).Dial("tcp", listen); err != nil {
		t.Errorf("gateway listener %s: %v", listen, err)
	}

	// docker stop sends SIGTERM: the gateway exits 0.
	if err := gw.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err
		if err != nil {
			t.Errorf("gateway exit after SIGTERM: %v; logs:\n%s", err, logs.String())
		}
	case <-time.After(15 * time.Second):
		t.Errorf("gateway still running 15s after SIGTERM; logs:\n%s", logs.String())
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
