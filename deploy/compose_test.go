package deploy

import (
	"maps"
	"net"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	yaml "go.yaml.in/yaml/v3"

	"github.com/quotagate/quotagate/config"
)

// composeFile is the part of the Compose specification the checks read.
// Keys are decoded as docker compose reads them, YAML merge keys included;
// keys not listed here are ignored.
type composeFile struct {
	Services map[string]composeService `yaml:"services"`
}

type composeService struct {
	Image string `yaml:"image"`
	Build *struct {
		Context    string `yaml:"context"`
		Dockerfile string `yaml:"dockerfile"`
	} `yaml:"build"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Ports       []string          `yaml:"ports"`
	Volumes     []string          `yaml:"volumes"`
	Healthcheck *struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
	DependsOn map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
	StopGracePeriod string `yaml:"stop_grace_period"`
}

// gatewayServices are the gateway replicas of docker-compose.yml; each must
// publish its own host ports.
var gatewayServices = []string{"gateway-1", "gateway-2"}

// wantServices are every service docker-compose.yml must define.
var wantServices = append(slices.Clone(gatewayServices), "redis", "demo", "otel-collector", "jaeger")

func readCompose(t *testing.T) composeFile { return readComposeFile(t, "docker-compose.yml") }

// readComposeFile reads the Compose file name of the repository's root.
func readComposeFile(t *testing.T, name string) composeFile {
	t.Helper()
	data, err := os.ReadFile(repoPath(name))
	if err != nil {
		t.Fatal(err)
	}
	var c composeFile
	if err := yaml.Unmarshal(data, &c); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return c
}

// builtHere reports whether a service runs the image of this repository's
// Dockerfile.
func (s composeService) builtHere() bool {
	return s.Build != nil && (s.Build.Context == "." || s.Build.Context == "./") &&
		(s.Build.Dockerfile == "" || s.Build.Dockerfile == "Dockerfile")
}

// mount returns the host path (relative to the repository root) mounted at
// target, and whether it is mounted read-only.
func (s composeService) mount(target string) (source string, readOnly, ok bool) {
	for _, v := range s.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 && parts[1] == target {
			return strings.TrimPrefix(parts[0], "./"), len(parts) == 3 && parts[2] == "ro", true
		}
	}
	return "", false, false
}

// env returns the environment a quotagate service's process sees: the
// image's ENV, then the service's environment.
func (s composeService) env(img imageSpec) map[string]string {
	env := maps.Clone(img.env)
	maps.Copy(env, s.Environment)
	return env
}

func TestComposeServices(t *testing.T) {
	c := readCompose(t)
	img := readImageSpec(t)
	for _, name := range wantServices {
		if _, ok := c.Services[name]; !ok {
			t.Errorf("docker-compose.yml: no service %q", name)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	checkComposeBasics(t, c, img)

	for _, name := range gatewayServices {
		s := c.Services[name]
		if !s.builtHere() {
			t.Errorf("%s: not built from the repository's Dockerfile", name)
		}
		if src, _, _ := s.mount(img.configPath); src != "deploy/config.compose.yaml" {
			t.Errorf("%s: mounts %q, want deploy/config.compose.yaml", name, src)
		}
		if len(s.Ports) != 2 {
			t.Errorf("%s: ports %q, want the gateway and the admin port published", name, s.Ports)
		}
		for dep, cond := range map[string]string{"redis": "service_healthy", "demo": "service_healthy", "otel-collector": "service_started"} {
			if got := s.DependsOn[dep].Condition; got != cond {
				t.Errorf("%s: depends_on %s: condition %q, want %q", name, dep, got, cond)
			}
		}
		env := s.env(img)
		if env["OTEL_EXPORTER_OTLP_PROTOCOL"] != "http/protobuf" {
			t.Errorf("%s: OTEL_EXPORTER_OTLP_PROTOCOL=%q, want http/protobuf", name, env["OTEL_EXPORTER_OTLP_PROTOCOL"])
		}
		if env["OTEL_EXPORTER_OTLP_ENDPOINT"] != "http://otel-collector:4318" {
			t.Errorf("%s: OTEL_EXPORTER_OTLP_ENDPOINT=%q, want http://otel-collector:4318", name, env["OTEL_EXPORTER_OTLP_ENDPOINT"])
		}
	}
	if s := c.Services["redis"]; s.Healthcheck == nil || len(s.Healthcheck.Test) == 0 {
		t.Error("redis: no healthcheck; the gateways wait for it to be healthy")
	}
	if src, _, _ := c.Services["otel-collector"].mount("/etc/otelcol/config.yaml"); src != "deploy/otel-collector.yaml" {
		t.Errorf("otel-collector: mounts %q at /etc/otelcol/config.yaml, want deploy/otel-collector.yaml", src)
	}
}

// checkComposeBasics checks what every Compose file of the repository
// must hold: images other than ours pinned, dependencies that exist with a
// condition they can meet, ports published on loopback once each, and our
// image's services with the Dockerfile's health check, its CMD, and a
// config that exists mounted read-only where CMD reads it.
func checkComposeBasics(t *testing.T, c composeFile, img imageSpec) {
	t.Helper()
	hostPorts := map[string]string{}
	for name, s := range c.Services {
		// Images other than ours are pinned, so that `up` is repeatable.
		if !s.builtHere() {
			if _, tag, ok := strings.Cut(s.Image, ":"); !ok || tag == "" || tag == "latest" {
				t.Errorf("%s: image %q: pin a version tag", name, s.Image)
			}
		}
		// Every dependency exists, with a condition it can meet.
		for dep, d := range s.DependsOn {
			ds, ok := c.Services[dep]
			switch {
			case !ok:
				t.Errorf("%s: depends_on %q, which is not a service", name, dep)
			case d.Condition == "service_healthy" && ds.Healthcheck == nil && !ds.builtHere():
				t.Errorf("%s: depends_on %s: service_healthy, but %s has no healthcheck", name, dep, dep)
			case !slices.Contains([]string{"service_started", "service_healthy", "service_completed_successfully"}, d.Condition):
				t.Errorf("%s: depends_on %s: condition %q; write one explicitly", name, dep, d.Condition)
			}
		}
		for _, p := range s.Ports {
			parts := strings.Split(p, ":")
			if len(parts) != 3 || parts[0] != "127.0.0.1" {
				t.Errorf("%s: port %q: publish as 127.0.0.1:HOST:CONTAINER", name, p)
				continue
			}
			if other, dup := hostPorts[parts[1]]; dup {
				t.Errorf("%s and %s both publish host port %s", name, other, parts[1])
			}
			hostPorts[parts[1]] = name
		}
	}

	// Our image: same health check as the Dockerfile, default entrypoint
	// and command, a config mounted read-only where CMD reads it.
	for name, s := range c.Services {
		if !s.builtHere() {
			continue
		}
		if s.Healthcheck == nil || !slices.Equal(s.Healthcheck.Test, append([]string{"CMD"}, img.healthcheck...)) {
			t.Errorf("%s: healthcheck %v, want [CMD %s] as in the Dockerfile", name, s.Healthcheck, strings.Join(img.healthcheck, " "))
		}
		if s.Command != nil {
			t.Errorf("%s: command %q; the image's CMD reads the mounted config", name, s.Command)
		}
		src, ro, ok := s.mount(img.configPath)
		if !ok {
			t.Errorf("%s: nothing mounted at %s, the image's config path", name, img.configPath)
			continue
		}
		if !ro {
			t.Errorf("%s: %s is mounted read-write; mount it :ro", name, img.configPath)
		}
		if _, err := os.Stat(repoPath(src)); err != nil {
			t.Errorf("%s: mounted config: %v", name, err)
		}
	}
}

// TestComposeConfigs loads every config the compose file mounts into our
// image with the environment that service runs with, through the config
// package and through `quotagate validate`, and checks that the addresses
// in them match the compose file: the store and upstreams are services,
// published ports are the ports listened on.
func TestComposeConfigs(t *testing.T) {
	c := readCompose(t)
	img := readImageSpec(t)
	bin := dockerBuiltBinary(t)

	loaded := loadComposeConfigs(t, c, img, bin, gatewayServices)

	for _, name := range gatewayServices {
		cfg := loaded[name]
		if cfg == nil {
			t.Fatalf("%s: no config loaded", name)
		}
		if cfg.Store.Kind != "redis" {
			t.Errorf("%s: store.kind %q, want redis: the replicas must share their limits", name, cfg.Store.Kind)
		}
		if cfg.Store.FleetSize != len(gatewayServices) {
			t.Errorf("%s: store.fleet_size %d, want %d replicas", name, cfg.Store.FleetSize, len(gatewayServices))
		}
		for _, a := range cfg.Store.Redis.Addrs {
			host, _, err := net.SplitHostPort(a)
			if _, ok := c.Services[host]; err != nil || !ok {
				t.Errorf("%s: store.redis.addrs %q: not a compose service", name, a)
			}
		}
		for _, up := range cfg.Upstreams {
			u, err := url.Parse(up.URL)
			if err != nil {
				t.Errorf("%s: upstream %s: %v", name, up.Name, err)
				continue
			}
			host, p := hostPort(u)
			target, ok := loaded[host]
			if !ok {
				t.Errorf("%s: upstream %s %s: not a quotagate service of the compose file", name, up.Name, up.URL)
				continue
			}
			if lp := port(t, target.Server.Listen); p != lp {
				t.Errorf("%s: upstream %s %s: %s listens on port %s", name, up.Name, up.URL, host, lp)
			}
		}
	}
}

// loadComposeConfigs loads every config c mounts into our image with the
// environment that service runs with, through the config package and
// through `quotagate validate` (bin), and checks that its published ports
// are the ones it listens on, that its health check probes its admin
// listener, and that the gateways' stop_grace_period lets SIGTERM drain.
// It returns the configs by service.
func loadComposeConfigs(t *testing.T, c composeFile, img imageSpec, bin string, gateways []string) map[string]*config.Config {
	t.Helper()
	loaded := map[string]*config.Config{}
	for _, name := range slices.Sorted(maps.Keys(c.Services)) {
		s := c.Services[name]
		if !s.builtHere() {
			continue
		}
		src, _, ok := s.mount(img.configPath)
		if !ok {
			continue // reported by TestComposeServices
		}
		env := s.env(img)
		cfg, err := config.Load(repoPath(src), func(k string) (string, bool) { v, ok := env[k]; return v, ok })
		if err != nil {
			t.Errorf("%s: %s: %v", name, src, err)
			continue
		}
		loaded[name] = cfg

		cmd := exec.Command(bin, "validate", "-config", repoPath(src))
		cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
		for k, v := range env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s: quotagate validate -config %s: %v\n%s", name, src, err, out)
		}

		// Published container ports are the ones the config listens on.
		want := []string{port(t, cfg.Server.Listen), port(t, cfg.Server.AdminListen)}
		for _, p := range s.Ports {
			if parts := strings.Split(p, ":"); !slices.Contains(want, parts[len(parts)-1]) {
				t.Errorf("%s: publishes container port %s; the config listens on %v", name, parts[len(parts)-1], want)
			}
		}
		// The health check probes the admin listener.
		if _, p := hostPort(healthcheckURL(t, img.healthcheck)); p != port(t, cfg.Server.AdminListen) {
			t.Errorf("%s: the healthcheck probes port %s, admin_listen is %s", name, p, cfg.Server.AdminListen)
		}
		// Long enough a stop for SIGTERM to drain.
		if s.StopGracePeriod != "" || slices.Contains(gateways, name) {
			grace, err := time.ParseDuration(s.StopGracePeriod)
			if err != nil || grace <= cfg.Server.ShutdownTimeout {
				t.Errorf("%s: stop_grace_period %q, want longer than server.shutdown_timeout %s", name, s.StopGracePeriod, cfg.Server.ShutdownTimeout)
			}
		}
	}
	return loaded
}

// port returns the port of a host:port address.
func port(t *testing.T, addr string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	if _, err := strconv.Atoi(p); err != nil {
		t.Fatalf("address %q: port is not a number", addr)
	}
	return p
}

// collectorConfig is the part of an OpenTelemetry Collector config the
// checks read.
type collectorConfig struct {
	Receivers  map[string]map[string]any `yaml:"receivers"`
	Processors map[string]any            `yaml:"processors"`
	Exporters  map[string]map[string]any `yaml:"exporters"`
	Service    struct {
		Pipelines map[string]struct {
			Receivers  []string `yaml:"receivers"`
			Processors []string `yaml:"processors"`
			Exporters  []string `yaml:"exporters"`
		} `yaml:"pipelines"`
	} `yaml:"service"`
}

// TestCollectorConfig checks deploy/otel-collector.yaml: it receives OTLP
// over HTTP where the gateways send it, on all interfaces; every pipeline
// names defined components; traces go to the jaeger service.
func TestCollectorConfig(t *testing.T) {
	data, err := os.ReadFile(repoPath("deploy/otel-collector.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cc collectorConfig
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	if err := dec.Decode(&cc); err != nil {
		t.Fatalf("otel-collector.yaml: %v", err)
	}
	compose := readCompose(t)
	img := readImageSpec(t)

	protocols, _ := cc.Receivers["otlp"]["protocols"].(map[string]any)
	httpProto, _ := protocols["http"].(map[string]any)
	endpoint, _ := httpProto["endpoint"].(string)
	host, recvPort, err := net.SplitHostPort(endpoint)
	if err != nil || host != "0.0.0.0" {
		t.Errorf("receivers.otlp.protocols.http.endpoint %q: want 0.0.0.0:PORT (the default, localhost, is unreachable from other containers)", endpoint)
	}
	for _, name := range gatewayServices {
		u, err := url.Parse(compose.Services[name].env(img)["OTEL_EXPORTER_OTLP_ENDPOINT"])
		if err != nil {
			t.Fatal(err)
		}
		if h, p := hostPort(u); h != "otel-collector" || p != recvPort {
			t.Errorf("%s exports to %s; the collector receives OTLP/HTTP on otel-collector:%s", name, u, recvPort)
		}
	}

	if len(cc.Service.Pipelines) == 0 {
		t.Fatal("otel-collector.yaml: no pipelines")
	}
	for pname, p := range cc.Service.Pipelines {
		if len(p.Receivers) == 0 || len(p.Exporters) == 0 {
			t.Errorf("pipeline %s: needs receivers and exporters", pname)
		}
		for _, r := range p.Receivers {
			if _, ok := cc.Receivers[r]; !ok {
				t.Errorf("pipeline %s: receiver %q is not defined", pname, r)
			}
		}
		for _, pr := range p.Processors {
			if _, ok := cc.Processors[pr]; !ok {
				t.Errorf("pipeline %s: processor %q is not defined", pname, pr)
			}
		}
		for _, e := range p.Exporters {
			if _, ok := cc.Exporters[e]; !ok {
				t.Errorf("pipeline %s: exporter %q is not defined", pname, e)
			}
		}
	}
	toJaeger := false
	for _, e := range cc.Service.Pipelines["traces"].Exporters {
		ep, _ := cc.Exporters[e]["endpoint"].(string)
		if h, _, err := net.SplitHostPort(ep); err == nil && h == "jaeger" {
			toJaeger = true
		}
	}
	if !toJaeger {
		t.Error("the traces pipeline exports to no exporter with endpoint jaeger:PORT")
	}
	if _, ok := compose.Services["jaeger"]; !ok {
		t.Error("docker-compose.yml: no jaeger service for the traces exporter")
	}
}
