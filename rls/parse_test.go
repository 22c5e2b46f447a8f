package rls

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// invalidFiles pairs each fixture of testdata/invalid with every problem
// ParseFile must report for it, in order.
var invalidFiles = map[string][]string{
	"bad_unit.yaml": {
		`testdata/invalid/bad_unit.yaml:5: descriptors[0].rate_limit.unit: must be second, minute, hour, day, week, month or year, got "fortnight"`,
	},
	"duplicate.yaml": {
		`testdata/invalid/duplicate.yaml:5: descriptors[1]: duplicate descriptor a=x`,
	},
	"empty_domain.yaml": {
		`testdata/invalid/empty_domain.yaml:1: domain: must not be empty`,
	},
	"empty_key.yaml": {
		`testdata/invalid/empty_key.yaml:3: descriptors[0].key: is required`,
	},
	"extensions.yaml": {
		`testdata/invalid/extensions.yaml:7: descriptors[0].rate_limit.algorithm: must be token_bucket, fixed_window, sliding_window or sliding_log, got "leaky_bucket"`,
		`testdata/invalid/extensions.yaml:8: descriptors[0].rate_limit.on_store_error: must be one of unavailable, open, closed, local, got "ignore"`,
		`testdata/invalid/extensions.yaml:13: descriptors[1].rate_limit.burst: applies to algorithm token_bucket only`,
		`testdata/invalid/extensions.yaml:16: descriptors[2].rate_limit.requests_per_unit: must be at most 1000 for sliding_log (its state holds one entry per request); use sliding_window for larger rates`,
	},
	"inexact.yaml": {
		`testdata/invalid/inexact.yaml:5: descriptors[0].rate_limit.requests_per_unit: rate × per (1000000 × 31536000000000µs) must be at most 2^53; lower the rate or the period`,
	},
	"malformed.yaml": {
		`testdata/invalid/malformed.yaml: malformed YAML: line 2: did not find expected '-' indicator`,
	},
	"replaces.yaml": {
		`testdata/invalid/replaces.yaml:9: descriptors[0].rate_limit.replaces[0].name: must not name the rule itself`,
		`testdata/invalid/replaces.yaml:10: descriptors[0].rate_limit.replaces[1].name: must not be empty`,
	},
	"share_without_wildcard.yaml": {
		`testdata/invalid/share_without_wildcard.yaml:5: descriptors[0].share_threshold: applies only to a value with a '*' wildcard`,
	},
	"unknown_key.yaml": {
		`testdata/invalid/unknown_key.yaml:7: descriptors[0].rate_limit.requests_per_hour: unknown key (allowed here: unit, requests_per_unit, unlimited, name, replaces, algorithm, burst, on_store_error)`,
	},
	"unknown_top.yaml": {
		`testdata/invalid/unknown_top.yaml:2: descriptor: unknown key (allowed here: domain, descriptors)`,
	},
	"unlimited_with_unit.yaml": {
		`testdata/invalid/unlimited_with_unit.yaml:6: descriptors[0].rate_limit.unit: must not be set when unlimited is true`,
	},
	"wrong_types.yaml": {
		`testdata/invalid/wrong_types.yaml:4: descriptors[0].shadow_mode: must be true or false, got "yes"`,
		`testdata/invalid/wrong_types.yaml:7: descriptors[0].rate_limit.requests_per_unit: must be a whole number from 0 to 4294967295, got "-1"`,
		`testdata/invalid/wrong_types.yaml:8: descriptors[1].key: must be a string, got a list`,
		`testdata/invalid/wrong_types.yaml:9: descriptors[2]: must be a mapping, got "just a string"`,
	},
}

func TestParseInvalidFiles(t *testing.T) {
	paths, err := filepath.Glob("testdata/invalid/*.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	for _, path := range paths {
		name := filepath.Base(path)
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			d, err := ParseFile(path, data)
			if err == nil {
				t.Fatalf("parsed %s as domain %q; want errors", name, d.Name)
			}
			got := strings.Split(err.Error(), "\n")
			want, ok := invalidFiles[name]
			if !ok {
				t.Fatalf("no expectation for %s; got:\n%s", name, err)
			}
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("%s: got\n%s\nwant\n%s", name, strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			var pe *ParseError
			if !errors.As(err, &pe) || pe.File != path {
				t.Errorf("%s: error %T does not name the file", name, err)
			}
		})
	}
}
