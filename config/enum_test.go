package config

import (
	"strings"
	"testing"
)

// TestEnumsNameTheirPath: a name a typed setting does not take is refused
// at its path, with the names it takes and the near one that was probably
// meant; a name far from every one gets no guess. A level is read in any
// case.
func TestEnumsNameTheirPath(t *testing.T) {
	for yaml, want := range map[string]string{
		`store: {kind: rediss}`:                  `store.kind: must be memory or redis, got "rediss" (did you mean "redis"?)`,
		`store: {kind: etcd}`:                    `store.kind: must be memory or redis, got "etcd"`,
		`server: {upstream_exchanges: standart}`: `server.upstream_exchanges: must be direct or standard, got "standart" (did you mean "standard"?)`,
		`log: {level: wran}`:                     `log.level: must be debug, info, warn or error, got "wran" (did you mean "warn"?)`,
		`rls: {on_store_error: unavailble}`:      `rls.on_store_error: must be unavailable, open, closed or local, got "unavailble" (did you mean "unavailable"?)`,
		`rls: {limit_overrides: ignroe}`:         `rls.limit_overrides: must be allow or ignore, got "ignroe" (did you mean "ignore"?)`,
		`store: {kind: [redis]}`:                 `store.kind: must be a string`,
	} {
		_, err := Parse([]byte(yaml), noEnv)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v\nwant %s", yaml, err, want)
		}
	}
	if _, err := Parse([]byte("log: {level: WARN}"), noEnv); err == nil || strings.Contains(err.Error(), "log.level") {
		t.Errorf("log.level WARN: %v; want it taken (other problems only)", err)
	}
}
