// Package opscheck holds the tests of quotagate's operator files: the
// Kubernetes manifests under deploy/kubernetes (rendered with kustomize and
// decoded strictly into the Kubernetes API types), the Prometheus alert
// rules under deploy/prometheus and the Grafana dashboard under
// deploy/grafana (every PromQL expression parsed with the Prometheus parser
// and every metric it reads checked against the /metrics of a real
// gateway), and the reload of a config delivered the way a ConfigMap volume
// delivers it.
//
// It is a module of its own so that the Kubernetes, kustomize and
// Prometheus libraries these tests need stay out of the gateway's module
// graph. It has no code besides its tests; scripts/test.sh runs them.
package opscheck
