package doccheck

import (
	"bufio"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// root is the repository's root, relative to this package.
const root = "../.."

// pages returns the Markdown files checked, relative to root: the root's
// README, CHANGELOG and BENCHMARKS, and every .md file under docs/.
func pages(t *testing.T) []string {
	t.Helper()
	out := []string{"README.md", "CHANGELOG.md", "BENCHMARKS.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// line is one line of a page outside fenced code blocks, with inline code
// spans blanked out, so that neither is read as a link or a heading.
type line struct {
	n    int
	text string
}

var (
	fence    = regexp.MustCompile("^\\s*(```|~~~)")
	codeSpan = regexp.MustCompile("`+[^`]*`+")
)

// prose returns the lines of a page that are not inside a fenced block.
// With blankCode, inline code spans are replaced by spaces.
func prose(t *testing.T, page string, blankCode bool) []line {
	t.Helper()
	f, err := os.Open(filepath.Join(root, page))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []line
	inFence := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		s := sc.Text()
		if fence.MatchString(s) {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		if blankCode {
			s = codeSpan.ReplaceAllStringFunc(s, func(c string) string { return strings.Repeat(" ", len(c)) })
		}
		out = append(out, line{n, s})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

var (
	heading    = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
	mdLink     = regexp.MustCompile(`!?\[([^\]]*)\]\(([^)\s]*)[^)]*\)`)
	htmlAnchor = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
	emphasis   = regexp.MustCompile(`\*+`)
)

// slug returns the anchor GitHub gives a heading's text: its rendered text
// (links and code spans reduced to their text) lowercased, every character
// that is not a letter, a digit, a space, '-' or '_' dropped, and spaces
// made '-'.
func slug(text string) string {
	text = mdLink.ReplaceAllString(text, "$1")
	text = strings.ReplaceAll(text, "`", "")
	text = emphasis.ReplaceAllString(text, "")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors returns the anchors of a page: one per heading (a repeated one
// gets -1, -2, ... as on GitHub) and any <a name> or id it declares.
func anchors(t *testing.T, page string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	seen := map[string]int{}
	for _, l := range prose(t, page, false) {
		if m := heading.FindStringSubmatch(l.text); m != nil {
			s := slug(m[2])
			if n := seen[s]; n > 0 {
				out[s+"-"+strconv.Itoa(n)] = true
			} else {
				out[s] = true
			}
			seen[s]++
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(l.text, -1) {
			out[m[1]] = true
		}
	}
	return out
}

// TestSlug pins the anchor rule on headings of the docs.
func TestSlug(t *testing.T) {
	for in, want := range map[string]string{
		"Reserve, then settle":                             "reserve-then-settle",
		"Readiness follows `on_store_error`":               "readiness-follows-on_store_error",
		"lease: auto":                                      "lease-auto",
		"What bounds Traefik's goal on `uniform`":          "what-bounds-traefiks-goal-on-uniform",
		"Which tenants need one?":                          "which-tenants-need-one",
		"Choosing max, slot_ttl, queue and target_latency": "choosing-max-slot_ttl-queue-and-target_latency",
		"`server.quota_path`":                              "serverquota_path",
		"Sliding windows: the bound":                       "sliding-windows-the-bound",
		"A [linked](other.md) heading":                     "a-linked-heading",
		"**Bold** words":                                   "bold-words",
	} {
		if got := slug(in); got != want {
			t.Errorf("slug(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestRelativeLinks fails on a relative link, in the prose of a page, to
// a file or directory that does not exist, or to an anchor that the page
// it names does not have.
func TestRelativeLinks(t *testing.T) {
	cache := map[string]map[string]bool{}
	checked := 0
	for _, page := range pages(t) {
		for _, l := range prose(t, page, true) {
			for _, m := range mdLink.FindAllStringSubmatch(l.text, -1) {
				target := m[2]
				if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					if target == "" {
						t.Errorf("%s:%d: a link with no target: %s", page, l.n, m[0])
					}
					continue
				}
				checked++
				file, anchor, _ := strings.Cut(target, "#")
				dest := page
				if file != "" {
					dest = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(page), file)))
					if strings.HasPrefix(dest, "../") {
						t.Errorf("%s:%d: %s leads out of the repository", page, l.n, target)
						continue
					}
					if _, err := os.Stat(filepath.Join(root, dest)); err != nil {
						if errors.Is(err, fs.ErrNotExist) {
							t.Errorf("%s:%d: %s: no such file %s", page, l.n, target, dest)
						} else {
							t.Errorf("%s:%d: %s: %v", page, l.n, target, err)
						}
						continue
					}
				}
				if anchor == "" {
					continue
				}
				if !strings.HasSuffix(dest, ".md") {
					t.Errorf("%s:%d: %s: an anchor into a file that is not Markdown", page, l.n, target)
					continue
				}
				a, ok := cache[dest]
				if !ok {
					a = anchors(t, dest)
					cache[dest] = a
				}
				if !a[anchor] {
					t.Errorf("%s:%d: %s: %s has no heading with the anchor #%s", page, l.n, target, dest, anchor)
				}
			}
		}
	}
	if checked < 100 {
		t.Fatalf("checked %d relative links; the link pattern no longer matches the pages", checked)
	}
}

// screens is the length past which a page of docs/ needs a table of
// contents: about two screens.
const screens = 100

// TestLongPagesHaveContents: every page of docs/ longer than two screens
// has a "Contents" heading.
func TestLongPagesHaveContents(t *testing.T) {
	for _, page := range pages(t) {
		if !strings.HasPrefix(page, "docs/") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, page))
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(b), "\n"); n > screens && !anchors(t, page)["contents"] {
			t.Errorf("%s: %d lines and no table of contents (a heading \"Contents\")", page, n)
		}
	}
}

// TestReadmeIsShort: the README says what quotagate is and points into
// docs/; the rest lives there.
func TestReadmeIsShort(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n > 300 {
		t.Errorf("README.md has %d lines; keep it to 300 and move the rest into docs/", n)
	}
}
