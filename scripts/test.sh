#!/usr/bin/env bash
# Runs every check and test of quotagate: formatting, vet, staticcheck, the
# race-enabled test suite (unit, Redis standalone and Cluster, end-to-end
# with real processes) and short fuzz runs.
#
# Needs redis-server. Where it is missing and we are root, it is installed
# with apt-get. With CI=true a missing redis-server is a failure, never a skip.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v redis-server >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "test.sh: redis-server not found; installing it with apt-get" >&2
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
  fi
fi
if ! command -v redis-server >/dev/null 2>&1; then
  if [ "${CI:-}" = "true" ]; then
    echo "test.sh: FATAL: redis-server is not installed and CI=true; the Redis and end-to-end tests cannot run" >&2
    exit 1
  fi
  echo "test.sh: WARNING: redis-server not found; Redis-backed tests will be skipped" >&2
fi

echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change:" >&2; echo "$unformatted" >&2; exit 1
fi

echo "== go vet"
go vet ./...

echo "== staticcheck"
go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

echo "== go test -race"
go test -race -count=1 -timeout 12m ./...

echo "== fuzz (short)"
for target in "FuzzMatch ./routes" "FuzzAuthenticate ./identity" \
  "FuzzExplain ./cmd/quotagate" "FuzzCommandLine ./cmd/quotagate"; do
  set -- $target
  if grep -rqs "func $1(" "$2"; then
    go test -run '^$' -fuzz "^$1\$" -fuzztime 20000x "$2"
  fi
done
echo "test.sh: all checks passed"
