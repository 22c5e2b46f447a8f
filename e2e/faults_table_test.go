package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// faultFuncRE finds the fault tests in this package's source.
var faultFuncRE = regexp.MustCompile(`(?m)^func (TestFault\w+)\(t \*testing\.T\)`)

// faultTests returns the names of the fault tests declared in the _test.go
// files of dir, sorted.
func faultTests(dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		return nil, err
	}
	var names []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		for _, m := range faultFuncRE.FindAllSubmatch(b, -1) {
			names = append(names, string(m[1]))
		}
	}
	sort.Strings(names)
	return names, nil
}

// faultRow is one line of a fault table, with the test it belongs to.
type faultRow struct {
	test, order, line string
}

// tableRows returns the rows of a rendered fault table, in their order.
func tableRows(table string) []faultRow {
	var rows []faultRow
	for i, line := range strings.Split(table, "\n") {
		if !strings.HasPrefix(line, "| Test") {
			continue
		}
		test, _, _ := strings.Cut(strings.TrimPrefix(line, "| "), " |")
		rows = append(rows, faultRow{test: test, order: fmt.Sprintf("%06d", i), line: line})
	}
	return rows
}

// updateFaultFile writes the fault table to path: the rows of this run's
// fault tests, and the rows path already holds for the fault tests of this
// package that did not run.
func updateFaultFile(path string) error {
	ran := map[string]bool{}
	fresh := tableRows(faultTable())
	for _, r := range fresh {
		ran[r.test] = true
	}
	declared, err := faultTests(".")
	if err != nil {
		return err
	}
	rows := fresh
	if old, err := os.ReadFile(path); err == nil {
		for _, r := range tableRows(string(old)) {
			if !ran[r.test] && slices.Contains(declared, r.test) {
				rows = append(rows, r)
			}
		}
	} else if !os.IsNotExist(err) {
		return err
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].test < rows[j].test })
	var b strings.Builder
	b.WriteString(faultPreamble)
	b.WriteString(faultHeader)
	for _, r := range rows {
		b.WriteString(r.line)
		b.WriteByte('\n')
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// TestTableOfFaultsIsCurrent checks e2e/FAULTS.md against this package
// without running a fault: its preamble and header are the ones
// faultTable writes, and it has rows for exactly the fault tests declared
// here. Regenerate it (see the package documentation) when this fails.
func TestTableOfFaultsIsCurrent(t *testing.T) {
	b, err := os.ReadFile("FAULTS.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	if !strings.HasPrefix(text, faultPreamble+faultHeader) {
		t.Errorf("FAULTS.md does not start with faultPreamble and the table header of main_test.go")
	}
	declared, err := faultTests(".")
	if err != nil || len(declared) == 0 {
		t.Fatalf("fault tests: %v %v", declared, err)
	}
	var inTable []string
	for _, r := range tableRows(text) {
		if !slices.Contains(inTable, r.test) {
			inTable = append(inTable, r.test)
		}
	}
	sort.Strings(inTable)
	for _, name := range declared {
		if !slices.Contains(inTable, name) {
			t.Errorf("FAULTS.md has no row of %s", name)
		}
	}
	for _, name := range inTable {
		if !slices.Contains(declared, name) {
			t.Errorf("FAULTS.md has rows of %s, which is no longer a test", name)
		}
	}
	if t.Failed() {
		t.Log("regenerate: QUOTAGATE_E2E_FAULTS=$PWD/FAULTS.md go test -race -count=1 -run 'TestFault' ./ (in e2e/)")
	}
}
