package opscheck

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// kustomizations are the directories of deploy/kubernetes that kubectl
// apply -k is pointed at.
var kustomizations = []string{"deploy/kubernetes/base", "deploy/kubernetes/overlays/redis"}

// manifests is the output of one kustomize build, decoded strictly.
type manifests struct {
	deployments map[string]*appsv1.Deployment
	services    map[string]*corev1.Service
	configMaps  map[string]*corev1.ConfigMap
	pdbs        map[string]*policyv1.PodDisruptionBudget
	hpas        map[string]*autoscalingv2.HorizontalPodAutoscaler
}

// render runs kustomize (the library kubectl -k embeds) on dir and decodes
// every resource strictly into its Kubernetes API type: an unknown field, a
// duplicate key or an unknown kind fails the test.
func render(t *testing.T, dir string) *manifests {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(filesys.MakeFsOnDisk(), repoPath(dir))
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	m := &manifests{
		deployments: map[string]*appsv1.Deployment{},
		services:    map[string]*corev1.Service{},
		configMaps:  map[string]*corev1.ConfigMap{},
		pdbs:        map[string]*policyv1.PodDisruptionBudget{},
		hpas:        map[string]*autoscalingv2.HorizontalPodAutoscaler{},
	}
	for _, r := range rm.Resources() {
		y, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		gvk := r.GetGvk()
		id := fmt.Sprintf("%s %s/%s %s", dir, gvk.ApiVersion(), gvk.Kind, r.GetName())
		switch gvk.ApiVersion() + "/" + gvk.Kind {
		case "apps/v1/Deployment":
			decodeInto(t, id, y, m.deployments, r.GetName())
		case "v1/Service":
			decodeInto(t, id, y, m.services, r.GetName())
		case "v1/ConfigMap":
			decodeInto(t, id, y, m.configMaps, r.GetName())
		case "policy/v1/PodDisruptionBudget":
			decodeInto(t, id, y, m.pdbs, r.GetName())
		case "autoscaling/v2/HorizontalPodAutoscaler":
			decodeInto(t, id, y, m.hpas, r.GetName())
		default:
			t.Errorf("%s: a kind this test does not check", id)
		}
	}
	return m
}

// decodeInto decodes y strictly into a new T and stores it in into[name].
func decodeInto[T any](t *testing.T, id string, y []byte, into map[string]*T, name string) {
	t.Helper()
	v := new(T)
	if err := yaml.UnmarshalStrict(y, v); err != nil {
		t.Errorf("%s: %v", id, err)
	}
	into[name] = v
}

// TestKustomizationsDecodeStrictly checks the kustomization files
// themselves against kustomize's types (an unknown key is an error).
func TestKustomizationsDecodeStrictly(t *testing.T) {
	for _, dir := range kustomizations {
		b, err := os.ReadFile(repoPath(dir + "/kustomization.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var k types.Kustomization
		if err := yaml.UnmarshalStrict(b, &k); err != nil {
			t.Errorf("%s/kustomization.yaml: %v", dir, err)
		}
	}
}

// gatewayConfig is the part of config.yaml the manifests must agree with.
type gatewayConfig struct {
	Server struct {
		Listen          string `json:"listen"`
		AdminListen     string `json:"admin_listen"`
		ShutdownTimeout string `json:"shutdown_timeout"`
	} `json:"server"`
	Store struct {
		Kind  string `json:"kind"`
		Redis struct {
			Addrs []string `json:"addrs"`
		} `json:"redis"`
	} `json:"store"`
}

// imageEnv returns the ENV of the Dockerfile's final stage.
func imageEnv(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(repoPath("Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	text := strings.ReplaceAll(string(b), "\\\n", " ")
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if strings.EqualFold(f[0], "FROM") {
			clear(env) // only the final stage counts
		}
		if !strings.EqualFold(f[0], "ENV") {
			continue
		}
		for _, kv := range f[1:] {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				t.Fatalf("Dockerfile: ENV %q: only the key=value form is understood here", kv)
			}
			env[k] = v
		}
	}
	return env
}

// effectiveAddrs applies the environment overrides the gateway applies
// (QUOTAGATE_SERVER_LISTEN, QUOTAGATE_SERVER_ADMIN_LISTEN) to cfg.
func effectiveAddrs(cfg gatewayConfig, env map[string]string) (listen, admin string) {
	listen, admin = cfg.Server.Listen, cfg.Server.AdminListen
	if v, ok := env["QUOTAGATE_SERVER_LISTEN"]; ok {
		listen = v
	}
	if v, ok := env["QUOTAGATE_SERVER_ADMIN_LISTEN"]; ok {
		admin = v
	}
	return listen, admin
}

func portOf(t *testing.T, what, addr string) int32 {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%s %q: %v", what, addr, err)
	}
	n, err := strconv.ParseInt(p, 10, 32)
	if err != nil {
		t.Fatalf("%s %q: %v", what, addr, err)
	}
	return int32(n)
}

// containerPort resolves a probe's or Service's port (a number or a name)
// to a container port number, or -1.
func containerPort(c *corev1.Container, p intstr.IntOrString) int32 {
	if p.Type == intstr.Int {
		return p.IntVal
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return cp.ContainerPort
		}
	}
	return -1
}

// gatewayParts returns the gateway Deployment, its container, the config
// file it reads (from its ConfigMap) and the environment the process sees
// (the image's ENV, then the container's literal env).
func gatewayParts(t *testing.T, m *manifests) (*appsv1.Deployment, *corev1.Container, gatewayConfig, []byte, map[string]string) {
	t.Helper()
	d := m.deployments["quotagate"]
	if d == nil {
		t.Fatal("no Deployment named quotagate")
	}
	var c *corev1.Container
	for i := range d.Spec.Template.Spec.Containers {
		if d.Spec.Template.Spec.Containers[i].Name == "quotagate" {
			c = &d.Spec.Template.Spec.Containers[i]
		}
	}
	if c == nil {
		t.Fatal("Deployment quotagate has no container named quotagate")
	}
	// The config file: -config's directory is a ConfigMap volume.
	cfgPath := "/etc/quotagate/config.yaml" // the image's CMD
	for i, a := range c.Args {
		if a == "-config" && i+1 < len(c.Args) {
			cfgPath = c.Args[i+1]
		}
	}
	var cm *corev1.ConfigMap
	for _, vm := range c.VolumeMounts {
		if vm.MountPath != path.Dir(cfgPath) {
			continue
		}
		if vm.SubPath != "" || vm.SubPathExpr != "" {
			t.Errorf("volume %s is mounted with a subPath: kubelet never updates it, so no reload", vm.Name)
		}
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Name == vm.Name && v.ConfigMap != nil {
				cm = m.configMaps[v.ConfigMap.Name]
				if cm == nil {
					t.Fatalf("volume %s names ConfigMap %q, which the kustomization does not define", v.Name, v.ConfigMap.Name)
				}
				if len(v.ConfigMap.Items) > 0 {
					t.Errorf("volume %s lists items; the ConfigMap's keys should map to files by name", v.Name)
				}
			}
		}
	}
	if cm == nil {
		t.Fatalf("-config %s: its directory is not a ConfigMap volume of the container", cfgPath)
	}
	data, ok := cm.Data[path.Base(cfgPath)]
	if !ok {
		t.Fatalf("ConfigMap %s has no key %q", cm.Name, path.Base(cfgPath))
	}
	var cfg gatewayConfig
	if err := yaml.Unmarshal([]byte(data), &cfg); err != nil {
		t.Fatalf("ConfigMap %s %s: %v", cm.Name, path.Base(cfgPath), err)
	}
	env := imageEnv(t)
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			env[e.Name] = e.Value
		}
	}
	return d, c, cfg, []byte(data), env
}

// TestKubernetesManifests renders each kustomization and checks what the
// gateway needs of its Deployment, Service, ConfigMap,
// PodDisruptionBudget and HorizontalPodAutoscaler.
func TestKubernetesManifests(t *testing.T) {
	for _, dir := range kustomizations {
		t.Run(path.Base(dir), func(t *testing.T) {
			m := render(t, dir)
			d, c, cfg, _, env := gatewayParts(t, m)
			pod := &d.Spec.Template.Spec
			listen, admin := effectiveAddrs(cfg, env)
			listenPort, adminPort := portOf(t, "server.listen", listen), portOf(t, "server.admin_listen", admin)

			// Ports: the named container ports are the ports the config listens on.
			if p := containerPort(c, intstr.FromString("http")); p != listenPort {
				t.Errorf("container port http = %d, server.listen %s", p, listen)
			}
			if p := containerPort(c, intstr.FromString("admin")); p != adminPort {
				t.Errorf("container port admin = %d, server.admin_listen %s", p, admin)
			}
			for _, a := range []string{listen, admin} {
				if h, _, _ := net.SplitHostPort(a); h != "" && h != "0.0.0.0" && h != "::" {
					t.Errorf("listen address %s: the kubelet and the Service reach the pod on its pod IP, not %s", a, h)
				}
			}

			// Probes: liveness /healthz and readiness /readyz on the admin port.
			probes := map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe, "startup": c.StartupProbe}
			wantPath := map[string]string{"liveness": "/healthz", "readiness": "/readyz", "startup": "/healthz"}
			for name, p := range probes {
				if p == nil || p.HTTPGet == nil {
					t.Errorf("%s probe: want an httpGet probe", name)
					continue
				}
				if p.HTTPGet.Path != wantPath[name] {
					t.Errorf("%s probe path %q, want %q", name, p.HTTPGet.Path, wantPath[name])
				}
				if got := containerPort(c, p.HTTPGet.Port); got != adminPort {
					t.Errorf("%s probe port %s = %d, want the admin port %d", name, p.HTTPGet.Port.String(), got, adminPort)
				}
			}

			// Shutdown: the endpoint goes first, then the drain, all within the grace period.
			shutdown, err := time.ParseDuration(cfg.Server.ShutdownTimeout)
			if err != nil {
				t.Fatalf("server.shutdown_timeout %q: %v (it must be set in the ConfigMap)", cfg.Server.ShutdownTimeout, err)
			}
			var preStop time.Duration
			switch {
			case c.Lifecycle == nil || c.Lifecycle.PreStop == nil:
				t.Error("no preStop hook: SIGTERM would start draining while the endpoint still receives requests")
			case c.Lifecycle.PreStop.Exec != nil:
				t.Error("preStop uses exec, but the distroless image has no shell and no sleep")
			case c.Lifecycle.PreStop.Sleep == nil || c.Lifecycle.PreStop.Sleep.Seconds < 1:
				t.Error("preStop: want a sleep action of at least 1s")
			default:
				preStop = time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
			}
			if pod.TerminationGracePeriodSeconds == nil {
				t.Error("terminationGracePeriodSeconds unset (30s default): state it")
			} else if grace := time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second; grace <= preStop+shutdown {
				t.Errorf("terminationGracePeriodSeconds %v <= preStop %v + shutdown_timeout %v: in-flight requests are killed", grace, preStop, shutdown)
			}

			// Memory: a limit, from which the gateway sets its own
			// GOMEMLIMIT and GOGC.
			if _, ok := c.Resources.Limits[corev1.ResourceMemory]; !ok {
				t.Error("no memory limit")
			}
			if _, ok := c.Resources.Requests[corev1.ResourceCPU]; !ok {
				t.Error("no CPU request: the autoscaler's utilization target has nothing to divide by")
			}
			if _, ok := c.Resources.Requests[corev1.ResourceMemory]; !ok {
				t.Error("no memory request")
			}
			checkMemoryEnv(t, c)

			// Security.
			psc, sc := pod.SecurityContext, c.SecurityContext
			if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
				t.Error("pod securityContext: want runAsNonRoot and a non-zero runAsUser")
			}
			if psc != nil && (psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault) {
				t.Error("pod securityContext: want seccompProfile RuntimeDefault")
			}
			switch {
			case sc == nil:
				t.Error("container securityContext missing")
			default:
				if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
					t.Error("container securityContext: readOnlyRootFilesystem is not true")
				}
				if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
					t.Error("container securityContext: allowPrivilegeEscalation is not false")
				}
				if sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
					t.Error("container securityContext: want capabilities drop [ALL]")
				}
				if sc.Privileged != nil && *sc.Privileged {
					t.Error("container is privileged")
				}
			}
			if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
				t.Error("automountServiceAccountToken: the gateway never calls the API server; set false")
			}

			// Service: selects the gateway pods and targets the gateway port.
			svc := m.services["quotagate"]
			if svc == nil {
				t.Fatal("no Service named quotagate")
			}
			if !selects(svc.Spec.Selector, d.Spec.Template.Labels) {
				t.Errorf("Service selector %v does not select the pod labels %v", svc.Spec.Selector, d.Spec.Template.Labels)
			}
			if !selects(d.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
				t.Errorf("Deployment selector %v does not select its own pods %v", d.Spec.Selector.MatchLabels, d.Spec.Template.Labels)
			}
			for _, p := range svc.Spec.Ports {
				if got := containerPort(c, p.TargetPort); got != listenPort {
					t.Errorf("Service port %s targets %s = %d, not server.listen's %d", p.Name, p.TargetPort.String(), got, listenPort)
				}
			}

			// Disruptions and scaling.
			pdb := m.pdbs["quotagate"]
			if pdb == nil {
				t.Fatal("no PodDisruptionBudget named quotagate")
			}
			if pdb.Spec.Selector == nil || !selects(pdb.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
				t.Error("PodDisruptionBudget does not select the gateway pods")
			}
			if pdb.Spec.MaxUnavailable == nil && pdb.Spec.MinAvailable == nil {
				t.Error("PodDisruptionBudget sets neither maxUnavailable nor minAvailable")
			}
			hpa := m.hpas["quotagate"]
			if hpa == nil {
				t.Fatal("no HorizontalPodAutoscaler named quotagate")
			}
			if ref := hpa.Spec.ScaleTargetRef; ref.Kind != "Deployment" || ref.Name != d.Name || ref.APIVersion != "apps/v1" {
				t.Errorf("HorizontalPodAutoscaler targets %+v, not the Deployment", ref)
			}
			if hpa.Spec.MinReplicas == nil || *hpa.Spec.MinReplicas < 2 || hpa.Spec.MaxReplicas < *hpa.Spec.MinReplicas {
				t.Error("HorizontalPodAutoscaler: want minReplicas >= 2 (the PodDisruptionBudget needs a spare) and maxReplicas >= minReplicas")
			}
			if d.Spec.Replicas != nil {
				t.Error("the Deployment sets replicas: every apply would reset the autoscaler's count")
			}

			// The Redis overlay: the store address is the Redis Service.
			if cfg.Store.Kind == "redis" {
				checkRedisAddrs(t, m, cfg.Store.Redis.Addrs)
			}
		})
	}
}

// selects reports whether every selector label is among labels.
func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// checkMemoryEnv reports a GOMEMLIMIT or GOGC in c's env: under the
// container's memory limit the gateway sets its own (90 % of the limit as
// GOMEMLIMIT, leaving room for memory the Go runtime does not count, and
// GOGC 200; docs/operations.md#container-memory-limit), which either
// variable would take back. The
// downward API can only pass the whole limit, which leaves no such room.
func checkMemoryEnv(t *testing.T, c *corev1.Container) {
	t.Helper()
	for _, e := range c.Env {
		if e.Name == "GOMEMLIMIT" || e.Name == "GOGC" {
			t.Errorf("env %s is set: it overrides the memory defaults the gateway derives from the container's limit", e.Name)
		}
	}
}

// checkRedisAddrs checks that every store.redis.addrs entry is a Service of
// the same build, on one of its ports.
func checkRedisAddrs(t *testing.T, m *manifests, addrs []string) {
	t.Helper()
	if len(addrs) == 0 {
		t.Error("store.kind is redis but store.redis.addrs is empty")
	}
	for _, a := range addrs {
		host, port := strings.Split(a, ":")[0], portOf(t, "store.redis.addrs", a)
		svc := m.services[strings.Split(host, ".")[0]]
		if svc == nil {
			t.Errorf("store.redis.addrs %s: no Service %q in this build", a, host)
			continue
		}
		found := false
		for _, p := range svc.Spec.Ports {
			found = found || p.Port == port
		}
		if !found {
			t.Errorf("store.redis.addrs %s: Service %s has no port %d", a, svc.Name, port)
		}
		var target *appsv1.Deployment
		for _, d := range m.deployments {
			if selects(svc.Spec.Selector, d.Spec.Template.Labels) {
				target = d
			}
		}
		if target == nil {
			t.Errorf("Service %s selects no Deployment of this build", svc.Name)
		}
	}
}

// TestKubernetesConfigRuns runs the real gateway as each Deployment would
// run it: its args (with the ConfigMap's config.yaml in a temporary
// directory), the image's ENV and the container's env, listeners moved to free loopback ports and, for the
// Redis overlay, a real redis-server in place of the Redis Service. Every
// probe's path must answer 200 on the admin listener, and `quotagate
// validate` must accept the config.
func TestKubernetesConfigRuns(t *testing.T) {
	for _, dir := range kustomizations {
		t.Run(path.Base(dir), func(t *testing.T) {
			m := render(t, dir)
			_, c, cfg, data, env := gatewayParts(t, m)
			tmp := t.TempDir()
			cfgFile := filepath.Join(tmp, "config.yaml")
			if err := os.WriteFile(cfgFile, data, 0o644); err != nil {
				t.Fatal(err)
			}
			args := configArgs(c.Args, cfgFile)

			out, err := exec.Command(gatewayBinary(t), "validate", "-config", cfgFile).CombinedOutput()
			if err != nil {
				t.Fatalf("quotagate validate of the %s ConfigMap: %v\n%s", dir, err, out)
			}

			env["QUOTAGATE_SERVER_LISTEN"] = "127.0.0.1:0"
			env["QUOTAGATE_SERVER_ADMIN_LISTEN"] = "127.0.0.1:0"
			if cfg.Store.Kind == "redis" {
				env["QUOTAGATE_STORE_REDIS_ADDRS"] = startRedis(t).addr
			}
			var envList []string
			for k, v := range env {
				envList = append(envList, k+"="+v)
			}
			g := startGateway(t, args, envList)
			for name, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe, "startup": c.StartupProbe} {
				if p == nil || p.HTTPGet == nil {
					continue // reported by TestKubernetesManifests
				}
				code, body, err := g.get(p.HTTPGet.Path)
				if err != nil || code != http.StatusOK {
					t.Errorf("%s probe GET %s on the admin listener: %d %v %s", name, p.HTTPGet.Path, code, err, body)
				}
			}
			// And the Service's port is the gateway: an anonymous request is routed.
			code, body, err := httpGet("http://" + g.listen + "/v1/anything")
			if err != nil || code != http.StatusOK {
				t.Errorf("GET /v1/anything on the gateway listener: %d %v %s", code, err, body)
			}
		})
	}
}

// configArgs returns args with -config's value replaced by file (or
// -config file appended when args do not set it).
func configArgs(args []string, file string) []string {
	out := append([]string(nil), args...)
	for i, a := range out {
		if a == "-config" && i+1 < len(out) {
			out[i+1] = file
			return out
		}
	}
	return append(out, "-config", file)
}
