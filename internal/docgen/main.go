// Command docgen writes the configuration reference,
// docs/reference/configuration.md, from the source of package config: one
// entry per key the decoder accepts, found by walking the mapstructure
// tags of the config types from Config (through structs, pointers, lists
// and maps), each with its type, default, whether a reload applies it,
// the environment variable that overrides it and its doc comment.
//
// It runs from config/generate.go:
//
//	go generate ./config
//
// Defaults come from config.Default (and the exported helpers that fill
// the sections Default leaves nil), or else from what the doc comment
// states; a key whose doc states none has none in the reference. Enum
// values come from the enum types' name tables, from config's exported
// value lists and from validation's messages.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "docgen:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("docgen", flag.ContinueOnError)
	out := fs.String("out", "", "the file to write (default: standard output)")
	dir := fs.String("config", ".", "the directory of package config")
	verbose := fs.Bool("v", false, "list the keys without a doc comment or a stated default on standard error")
	if err := fs.Parse(args); err != nil {
		return err
	}
	w, err := walk(*dir)
	if err != nil {
		return err
	}
	if *verbose {
		for _, k := range w.keys {
			if k.doc == "" && k.typeDoc == "" {
				fmt.Fprintf(os.Stderr, "no doc: %s\n", k.path)
			}
			if k.def == "" && k.typ.kind != kStruct && k.typ.kind != kMap {
				fmt.Fprintf(os.Stderr, "no default stated: %s\n", k.path)
			}
		}
	}
	page := []byte(w.render())
	if *out == "" {
		_, err := os.Stdout.Write(page)
		return err
	}
	if old, err := os.ReadFile(*out); err == nil && bytes.Equal(old, page) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
		return err
	}
	return os.WriteFile(*out, page, 0o644)
}

// Generate returns the reference for the package config in dir.
func Generate(dir string) ([]byte, error) {
	w, err := walk(dir)
	if err != nil {
		return nil, err
	}
	return []byte(w.render()), nil
}

// walk collects the keys of the package config in dir.
func walk(dir string) (*walker, error) {
	src, err := newSource(dir)
	if err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	rel, err := filepath.Rel(src.root, abs)
	if err != nil {
		return nil, err
	}
	cfg, err := src.load(strings.TrimSuffix(src.module+"/"+filepath.ToSlash(rel), "/."))
	if err != nil {
		return nil, err
	}
	root := cfg.named("Config")
	if root.kind != kStruct {
		return nil, errors.New("package config declares no struct Config")
	}
	w := &walker{cfg: cfg, alts: map[string]map[string]alternative{}}
	w.walkStruct(root, rootAt())
	var unknown []string
	for _, k := range w.keys {
		if typeName(k.typ, k.doc) == "unknown" || k.typ.kind == kSlice && k.typ.elem.kind == kUnknown {
			unknown = append(unknown, k.path)
		}
	}
	if unknown != nil {
		return nil, fmt.Errorf("keys of a type the generator does not know: %s", strings.Join(unknown, ", "))
	}
	return w, nil
}
