#!/usr/bin/env bash
# Runs every check and test of quotagate: formatting, vet, staticcheck, the
# race-enabled test suite (unit, Redis standalone and Cluster, end-to-end
# with real processes), short fuzz runs, the Prometheus alert rules (promtool check and test
# rules) and the tests of deploy/opscheck, a module of its own (Kubernetes
# manifests, ConfigMap reloads, dashboard and alert queries against a real
# gateway's /metrics, the admin console in headless Chromium).
#
# Needs redis-server, promtool, chromium and node with npm (Debian's
# redis-server, prometheus, chromium, nodejs and npm packages; the openai
# npm package is installed into a cache directory). Where one is missing and we are root,
# it is installed with apt-get (once: prometheus took 25 s here, chromium
# 76 s). With CI=true a missing tool is
# a failure, never a skip.
set -euo pipefail
cd "$(dirname "$0")/.."

# need COMMAND PACKAGE WHAT: installs PACKAGE when COMMAND is missing (as
# root, with apt-get); then, if still missing, fails under CI=true or warns
# that WHAT will not run.
apt_updated=
need() {
  local cmd=$1 pkg=$2 what=$3
  if ! command -v "$cmd" >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "test.sh: $cmd not found; installing $pkg with apt-get" >&2
    if [ -z "$apt_updated" ]; then apt-get update -qq >/dev/null; apt_updated=1; fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$pkg" >/dev/null
  fi
  if ! command -v "$cmd" >/dev/null 2>&1; then
    if [ "${CI:-}" = "true" ]; then
      echo "test.sh: FATAL: $cmd is not installed and CI=true; $what cannot run" >&2
      exit 1
    fi
    echo "test.sh: WARNING: $cmd not found; $what will be skipped" >&2
    return 1
  fi
}
need redis-server redis-server "the Redis and end-to-end tests" || true
have_promtool=1
need promtool prometheus "the alert rule tests" || have_promtool=
need chromium chromium "the admin console's browser test" || true

# The Node openai SDK, for e2e/openai_sdk_test.go (which finds it in
# QUOTAGATE_NPM_DIR): installed once with npm into a cache directory,
# pinned to the version the test was written against.
openai_sdk_version=7.55.0
export QUOTAGATE_NPM_DIR="${QUOTAGATE_NPM_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/quotagate-npm}"
if need node nodejs "the OpenAI SDK end-to-end test" && need npm npm "the OpenAI SDK end-to-end test"; then
  sdk_pkg="$QUOTAGATE_NPM_DIR/node_modules/openai/package.json"
  if ! grep -qs "\"version\": \"$openai_sdk_version\"" "$sdk_pkg"; then
    echo "test.sh: installing the openai npm package $openai_sdk_version into $QUOTAGATE_NPM_DIR" >&2
    mkdir -p "$QUOTAGATE_NPM_DIR"
    [ -f "$QUOTAGATE_NPM_DIR/package.json" ] || echo '{"private": true}' >"$QUOTAGATE_NPM_DIR/package.json"
    if ! (cd "$QUOTAGATE_NPM_DIR" && npm install --no-audit --no-fund --loglevel=error "openai@$openai_sdk_version" >&2); then
      if [ "${CI:-}" = "true" ]; then
        echo "test.sh: FATAL: npm could not install openai@$openai_sdk_version and CI=true" >&2
        exit 1
      fi
      echo "test.sh: WARNING: openai@$openai_sdk_version not installed; the OpenAI SDK test will be skipped" >&2
    fi
  fi
fi

echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change:" >&2; echo "$unformatted" >&2; exit 1
fi

echo "== go vet"
go vet ./...
# The build without the decision service has files of its own.
go vet -tags norls ./cmd/quotagate/

echo "== staticcheck"
go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

echo "== go test -race"
go test -race -count=1 -timeout 12m ./...

echo "== fuzz (short)"
for target in "FuzzMatch ./routes" "FuzzAuthenticate ./identity" \
  "FuzzExplain ./cmd/quotagate 3000x" "FuzzCommandLine ./cmd/quotagate" \
  "FuzzWatchJSON ./usage" "FuzzWatchSSE ./usage" "FuzzFromRequest ./usage 5000x" "FuzzExpr ./usage"; do
  # name, package, and optionally the run count (FuzzExplain loads the
  # config and builds a pipeline per input: a few ms each)
  set -- $target
  if grep -rqs "func $1(" "$2"; then
    go test -run '^$' -fuzz "^$1\$" -fuzztime "${3:-20000x}" "$2"
  fi
done
echo "== promtool (deploy/prometheus)"
if [ -n "$have_promtool" ]; then
  promtool check rules deploy/prometheus/alerts.yaml
  promtool test rules deploy/prometheus/tests/*.yaml
fi

echo "== deploy/opscheck (its own module)"
(
  cd deploy/opscheck
  go vet ./...
  go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
  go test -race -count=1 -timeout 10m ./...
)
echo "test.sh: all checks passed"
