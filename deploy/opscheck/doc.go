// Package opscheck holds the tests of quotagate's operator files: the
// Kubernetes manifests under deploy/kubernetes (rendered with kustomize and
// decoded strictly into the Kubernetes API types), the Prometheus alert
// rules under deploy/prometheus and the Grafana dashboard under
// deploy/grafana (every PromQL expression parsed with the Prometheus parser
// and every metric it reads checked against the /metrics of a real
// gateway), the reload of a config delivered the way a ConfigMap volume
// delivers it, and the admin console in headless Chromium (chromedp).
//
// It is a module of its own so that the libraries these tests need stay out
// of the gateway's module graph: k8s.io/api with apimachinery and the
// kustomize API (about 35 modules, 1.5 minutes to compile cold), and
// github.com/prometheus/prometheus, whose parser package is light but whose
// module asks for a newer Go and newer Prometheus client modules than the
// gateway builds with. It has no code besides its tests, which build and
// run the gateway binary rather than import the gateway, so the two
// modules share no requirements; scripts/test.sh runs them.
package opscheck
