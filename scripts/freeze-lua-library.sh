#!/usr/bin/env bash
# Usage: scripts/freeze-lua-library.sh COMMIT
#
# Writes the Redis function library of quotagate at COMMIT, byte for byte
# as that version's gateway loads it (FUNCTION LOAD), to
# ratelimit/redisstore/testdata/library_<first 7 hex digits>.lua, for the
# test that checks stored state against the previous version
# (redis_compat_test.go).
#
# The text is not rebuilt here: the package ratelimit/redisstore of COMMIT
# is extracted to a temporary directory (git archive) and its own code
# assembles the library; a test file added there, alone with the package's
# sources (its tests are left out), writes the package variable
# librarySource. Needs git and go; the module's dependencies must be those
# of this checkout's module cache (go.mod is taken from COMMIT).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ $# -ne 1 ]; then
  echo "usage: $0 COMMIT" >&2
  exit 2
fi
full=$(git rev-parse --verify "$1^{commit}")
short=${full:0:7}
out=$PWD/ratelimit/redisstore/testdata/library_$short.lua

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git archive "$full" | tar -x -C "$tmp"
pkg=$tmp/ratelimit/redisstore
rm -f "$pkg"/*_test.go
cat >"$pkg/freeze_library_test.go" <<'EOF'
package redisstore

import (
	"os"
	"testing"
)

func TestFreezeLibrary(t *testing.T) {
	if err := os.WriteFile(os.Getenv("QG_FREEZE_OUT"), []byte(librarySource), 0o644); err != nil {
		t.Fatal(err)
	}
}
EOF
(cd "$tmp" && QG_FREEZE_OUT=$out go test -count=1 -run '^TestFreezeLibrary$' ./ratelimit/redisstore/ >/dev/null)
echo "$out: $(head -n 1 "$out")"
