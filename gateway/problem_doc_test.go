package gateway

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestProblemReferenceListsEveryCode: docs/reference/problems.md has a
// row for every problem code the gateway writes, with its title, and no
// code the gateway does not have (internal_error, which no request path
// writes, is named in the prose below the table).
func TestProblemReferenceListsEveryCode(t *testing.T) {
	b, err := os.ReadFile("../docs/reference/problems.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := regexp.MustCompile("(?m)^\\| \\d{3} \\| `([a-z_]+)` \\| ([^|]+) \\|").FindAllSubmatch(b, -1)
	documented := map[string]string{}
	for _, r := range rows {
		documented[string(r[1])] = strings.TrimSpace(string(r[2]))
	}
	for code, title := range problemTitles {
		if code == codeInternal {
			continue
		}
		got, ok := documented[code]
		if !ok {
			t.Errorf("problem code %s is not in docs/reference/problems.md", code)
		} else if got != title {
			t.Errorf("problem code %s: the reference says %q, the gateway writes %q", code, got, title)
		}
	}
	for code := range documented {
		if _, ok := problemTitles[code]; !ok {
			t.Errorf("docs/reference/problems.md lists %s, which the gateway does not write", code)
		}
	}
}
