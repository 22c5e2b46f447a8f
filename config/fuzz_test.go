package config

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// FuzzParse checks that no input makes Parse panic, and that a config Parse
// accepts passes Validate again, which leaves it as it was, as does
// Normalize run again.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("testdata/*/*.yaml")
	files = append(files, "testdata/minimal.yaml", "../config.yaml")
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("- a\n- b\n"))
	f.Add([]byte("routes: {a: 1}\ntiers: [1]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, noEnv)
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("accepted config fails Validate again: %v", err)
		}
		again, _ := Parse(data, noEnv)
		if !reflect.DeepEqual(c, again) {
			t.Fatal("Validate changed the config it checked")
		}
		c.Normalize()
		if !reflect.DeepEqual(c, again) {
			t.Fatal("Normalize changed a normalized config")
		}
	})
}
