package deploy

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// smallBases are the final-stage images the Dockerfile may use: no shell,
// no package manager.
var smallBases = []string{"gcr.io/distroless/static-debian12:nonroot", "scratch"}

// imageSpec is what the Dockerfile says about the image.
type imageSpec struct {
	build, final stage
	// binPath is where the final stage copies the binary from the build
	// stage; ENTRYPOINT runs it.
	binPath string
	// binSource is where the final stage copies the binary from.
	binSource string
	// configPath is the -config argument of CMD.
	configPath string
	// env is the final stage's ENV.
	env map[string]string
	// healthcheck is the HEALTHCHECK's command, exec form.
	healthcheck []string
	// buildEnv and buildArgs are the `go build` RUN: its leading variable
	// assignments and the words after "go build", variables unexpanded.
	buildEnv  map[string]string
	buildArgs []string
	// copies maps a final-stage COPY destination to its source, for COPYs
	// from the build context.
	copies map[string]string
}

// readImageSpec parses the Dockerfile and fails the test on any structural
// problem the later checks rely on.
func readImageSpec(t *testing.T) imageSpec {
	t.Helper()
	stages := readDockerfile(t)
	if len(stages) < 2 {
		t.Fatalf("Dockerfile has %d stage(s), want a multi-stage build", len(stages))
	}
	s := imageSpec{final: stages[len(stages)-1], copies: map[string]string{}}
	builders := map[string]stage{}
	for _, st := range stages[:len(stages)-1] {
		if st.name != "" {
			builders[st.name] = st
		}
	}
	for _, in := range s.final.all("COPY") {
		words := strings.Fields(in.args)
		if len(words) != 2 && !(len(words) == 3 && strings.HasPrefix(words[0], "--from=")) {
			t.Fatalf("Dockerfile line %d: COPY %s: want one source and one destination", in.line, in.args)
		}
		src, dst := words[len(words)-2], words[len(words)-1]
		if len(words) == 3 {
			from := strings.TrimPrefix(words[0], "--from=")
			st, ok := builders[from]
			if !ok {
				t.Fatalf("Dockerfile line %d: COPY --from=%s names no earlier stage", in.line, from)
			}
			if s.binPath != "" {
				t.Fatalf("Dockerfile line %d: a second COPY --from", in.line)
			}
			s.build, s.binPath, s.binSource = st, dst, src
			continue
		}
		s.copies[dst] = src
	}
	if s.binPath == "" {
		t.Fatal("Dockerfile: the final stage copies no binary from a build stage")
	}
	for _, in := range s.build.all("RUN") {
		words, err := shellWords(in.args)
		if err != nil {
			t.Fatalf("Dockerfile line %d: %v", in.line, err)
		}
		words = slices.DeleteFunc(words, func(w string) bool { return strings.HasPrefix(w, "--mount=") })
		env := map[string]string{}
		for len(words) > 0 && strings.Contains(words[0], "=") && !strings.HasPrefix(words[0], "-") {
			k, v, _ := strings.Cut(words[0], "=")
			env[k] = v
			words = words[1:]
		}
		if len(words) >= 2 && words[0] == "go" && words[1] == "build" {
			if s.buildArgs != nil {
				t.Fatalf("Dockerfile line %d: a second go build", in.line)
			}
			s.buildEnv, s.buildArgs = env, words[2:]
		}
	}
	if s.buildArgs == nil {
		t.Fatalf("Dockerfile: stage %q has no `go build` RUN", s.build.name)
	}
	s.env = stageEnv(t, s.final)

	entry := s.final.all("ENTRYPOINT")
	if len(entry) != 1 {
		t.Fatalf("Dockerfile: the final stage has %d ENTRYPOINTs, want 1", len(entry))
	}
	if args, err := execForm(entry[0].args); err != nil || !slices.Equal(args, []string{s.binPath}) {
		t.Fatalf("Dockerfile: ENTRYPOINT %s, want [%q] in exec form (err %v)", entry[0].args, s.binPath, err)
	}
	cmd := s.final.all("CMD")
	if len(cmd) != 1 {
		t.Fatalf("Dockerfile: the final stage has %d CMDs, want 1", len(cmd))
	}
	args, err := execForm(cmd[0].args)
	if err != nil || len(args) != 2 || args[0] != "-config" {
		t.Fatalf("Dockerfile: CMD %s, want [\"-config\", PATH] in exec form (err %v)", cmd[0].args, err)
	}
	s.configPath = args[1]

	hc := s.final.all("HEALTHCHECK")
	if len(hc) != 1 {
		t.Fatalf("Dockerfile: the final stage has %d HEALTHCHECKs, want 1", len(hc))
	}
	rest := hc[0].args
	for strings.HasPrefix(rest, "--") {
		_, rest, _ = strings.Cut(rest, " ")
		rest = strings.TrimSpace(rest)
	}
	after, ok := strings.CutPrefix(rest, "CMD ")
	if !ok {
		t.Fatalf("Dockerfile: HEALTHCHECK %s: want [options] CMD [...]", hc[0].args)
	}
	if s.healthcheck, err = execForm(strings.TrimSpace(after)); err != nil {
		t.Fatalf("Dockerfile: HEALTHCHECK: %v (distroless has no shell)", err)
	}
	return s
}

func TestDockerfile(t *testing.T) {
	s := readImageSpec(t)

	if !slices.Contains(smallBases, s.final.image) {
		t.Errorf("final stage FROM %s, want one of %q", s.final.image, smallBases)
	}
	users := s.final.all("USER")
	if len(users) == 0 {
		t.Error("final stage: no USER; the gateway would run as root")
	}
	for _, u := range users {
		name, _, _ := strings.Cut(u.args, ":")
		if name == "" || name == "root" || name == "0" {
			t.Errorf("Dockerfile line %d: USER %s is root", u.line, u.args)
		}
	}

	// The builder's Go is the release go.mod asks for.
	gomod, err := os.ReadFile(repoPath("go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	var goVersion string
	for line := range strings.SplitSeq(string(gomod), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "go "); ok {
			goVersion = v
		}
	}
	parts := strings.SplitN(goVersion, ".", 3)
	if len(parts) < 2 {
		t.Fatalf("go.mod: go directive %q", goVersion)
	}
	release := parts[0] + "." + parts[1]
	if tag, ok := strings.CutPrefix(s.build.image, "golang:"); !ok || (tag != release && !strings.HasPrefix(tag, release+".") && !strings.HasPrefix(tag, release+"-")) {
		t.Errorf("build stage FROM %s, want golang:%s (go.mod: go %s)", s.build.image, release, goVersion)
	}

	// The build flags: static, reproducible paths, stripped, versioned.
	if s.buildEnv["CGO_ENABLED"] != "0" {
		t.Errorf("go build env %v: want CGO_ENABLED=0 for a static binary", s.buildEnv)
	}
	if !slices.Contains(s.buildArgs, "-trimpath") {
		t.Errorf("go build %q: no -trimpath", s.buildArgs)
	}
	ld := ldflags(s.buildArgs)
	for _, f := range []string{"-s", "-w", "-X"} {
		if !slices.Contains(strings.Fields(ld), f) {
			t.Errorf("go build -ldflags %q: no %s", ld, f)
		}
	}
	if !strings.Contains(ld, "-X main.version=") {
		t.Errorf("go build -ldflags %q: the version is not set in main.version", ld)
	}
	if i := slices.Index(s.buildArgs, "-o"); i < 0 || i+1 >= len(s.buildArgs) || s.buildArgs[i+1] != s.binSource {
		t.Errorf("go build %q: want -o %s, the file the final stage copies", s.buildArgs, s.binSource)
	}
	if pkg := s.buildArgs[len(s.buildArgs)-1]; pkg != "./cmd/quotagate" {
		t.Errorf("go build builds %s, want ./cmd/quotagate", pkg)
	}

	// The default config is the shipped example, at the path CMD names.
	if src := s.copies[s.configPath]; src != "config.yaml" {
		t.Errorf("CMD -config %s: the image puts %q there, want the repository's config.yaml", s.configPath, src)
	}

	// The health check runs the image's own binary against the admin
	// listener the image's ENV opens.
	hc := s.healthcheck
	if len(hc) < 2 || hc[0] != s.binPath || hc[1] != "healthcheck" {
		t.Fatalf("HEALTHCHECK CMD %q: want [%q, \"healthcheck\", ...]", hc, s.binPath)
	}
	u := healthcheckURL(t, hc)
	_, adminPort, err := net.SplitHostPort(s.env["QUOTAGATE_SERVER_ADMIN_LISTEN"])
	if err != nil {
		t.Fatalf("ENV QUOTAGATE_SERVER_ADMIN_LISTEN=%q: %v", s.env["QUOTAGATE_SERVER_ADMIN_LISTEN"], err)
	}
	if u.Hostname() != "127.0.0.1" || u.Port() != adminPort || u.Path != "/readyz" {
		t.Errorf("HEALTHCHECK probes %s, want http://127.0.0.1:%s/readyz", u, adminPort)
	}
	if _, port, _ := net.SplitHostPort(s.env["QUOTAGATE_SERVER_LISTEN"]); port == "" {
		t.Errorf("ENV QUOTAGATE_SERVER_LISTEN=%q: want host:port", s.env["QUOTAGATE_SERVER_LISTEN"])
	}
}

// ldflags returns the value of -ldflags in go build's words.
func ldflags(args []string) string {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "-ldflags="); ok {
			return v
		}
		if a == "-ldflags" && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// healthcheckURL returns the -url argument of a healthcheck command.
func healthcheckURL(t *testing.T, cmd []string) *url.URL {
	t.Helper()
	i := slices.Index(cmd, "-url")
	if i < 0 || i+1 >= len(cmd) {
		t.Fatalf("healthcheck command %q: no -url", cmd)
	}
	u, err := url.Parse(cmd[i+1])
	if err != nil {
		t.Fatalf("healthcheck -url: %v", err)
	}
	return u
}

// ignoreMatch reports whether a .dockerignore pattern matches the
// slash-separated path name, with the semantics of Docker's pattern
// matcher: path.Match per path element, and "**" for any number of
// elements (including none).
func ignoreMatch(pattern, name string) bool {
	return matchElems(strings.Split(pattern, "/"), strings.Split(name, "/"))
}

func matchElems(pat, name []string) bool {
	if len(pat) == 0 {
		return len(name) == 0
	}
	if pat[0] == "**" {
		for i := 0; i <= len(name); i++ {
			if matchElems(pat[1:], name[i:]) {
				return true
			}
		}
		return false
	}
	if len(name) == 0 {
		return false
	}
	ok, err := path.Match(pat[0], name[0])
	return err == nil && ok && matchElems(pat[1:], name[1:])
}

// ignored reports whether a .dockerignore with patterns keeps name out of
// the build context: the last pattern matching name or one of its parent
// directories decides, and a "!" pattern brings it back.
func ignored(patterns []string, name string) bool {
	excluded := false
	elems := strings.Split(name, "/")
	for _, p := range patterns {
		negate := strings.HasPrefix(p, "!")
		p = path.Clean(strings.TrimPrefix(strings.TrimPrefix(p, "!"), "/"))
		for i := 1; i <= len(elems); i++ {
			if ignoreMatch(p, strings.Join(elems[:i], "/")) {
				excluded = !negate
				break
			}
		}
	}
	return excluded
}

func TestIgnoreMatcher(t *testing.T) {
	patterns := []string{"quotagate", "**/*.test", "deploy", "docs/*.md", "!docs/keep.md"}
	for name, want := range map[string]bool{
		"quotagate":               true,
		"cmd/quotagate/main.go":   false,
		"x.test":                  true,
		"gateway/gateway.test":    true,
		"deploy/deploy_test.go":   true,
		"docs/a.md":               true,
		"docs/keep.md":            false,
		"ratelimit/lua/bucket.go": false,
	} {
		if got := ignored(patterns, name); got != want {
			t.Errorf("ignored(%q) = %v, want %v", name, got, want)
		}
	}
}

// TestDockerignoreKeepsBuildInputs checks that the build context keeps
// every file the image build reads: go.mod, go.sum, what the Dockerfile
// COPYs by name, and every source and embedded file of the packages of the
// module that cmd/quotagate imports.
func TestDockerignoreKeepsBuildInputs(t *testing.T) {
	data, err := os.ReadFile(repoPath(".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for line := range strings.SplitSeq(string(data), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			patterns = append(patterns, line)
		}
	}
	s := readImageSpec(t)
	need := []string{"go.mod", "go.sum"}
	for _, src := range s.copies {
		need = append(need, src)
	}
	cmd := exec.Command("go", "list", "-e", "-deps", "-json=Dir,Module,GoFiles,SFiles,EmbedFiles", "./cmd/quotagate")
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p struct {
			Dir                         string
			Module                      *struct{ Main bool }
			GoFiles, SFiles, EmbedFiles []string
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		if p.Module == nil || !p.Module.Main {
			continue
		}
		rel, err := filepath.Rel(repoRoot, p.Dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range slices.Concat(p.GoFiles, p.SFiles, p.EmbedFiles) {
			need = append(need, filepath.ToSlash(filepath.Join(rel, f)))
		}
	}
	if !slices.Contains(need, "cmd/quotagate/main.go") {
		t.Fatalf("go list found no cmd/quotagate/main.go among %q", need)
	}
	for _, f := range need {
		if ignored(patterns, f) {
			t.Errorf(".dockerignore leaves %s out of the build context; the image build needs it", f)
		}
	}
	for _, f := range []string{".git/HEAD", "docker-compose.yml", "e2e/main_test.go"} {
		if !ignored(patterns, f) {
			t.Errorf(".dockerignore sends %s to the builder; the image does not need it", f)
		}
	}
}
