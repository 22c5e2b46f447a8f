package routes

import (
	"net/url"
	"regexp"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// FuzzMatch checks that Match never panics, is stable, and agrees with a
// plain reference matcher built on strings.Split and url.PathUnescape: the
// matched spec's template really matches, and no earlier spec does. The
// canonical spelling of a path matches what the path matches.
func FuzzMatch(f *testing.F) {
	tab := mustTable(f, testSpecs)
	for _, seed := range []string{
		"/", "/v1/transfers/1", "/v1/transfers/1/", "/v1//x", "/v1/files/a/b",
		"/v1/%74ransfers/%2e%2E", "/v1/transfers/a%2Fb", "/v1/items/x/sub",
		"/v2/a/b", "/v1/thing%3arun", "/?q", "%", "/v1/transfers/%C3%A9",
		"/V1/Transfers;x=1/1", "/v1/%2574ransfers/1", "/v1/%EF%BD%94ransfers/1",
		"/v1/transfers%20./1", "/v1/%E2%80%A5", "/v1/tra%CC%81nsfers/%C0%AE",
		"/v1/accounts/me.json", "/v1/probe.x.y", "/v1/items/x/sub.json",
		"/index.php/v1/transfers/1", "/v1/index.php/accounts/me", "/index.php",
	} {
		f.Add("GET", seed)
		f.Add("HEAD", seed)
	}
	f.Add("POST", "/v1/transfers/x")
	f.Fuzz(func(t *testing.T, method, path string) {
		m1, ok1 := tab.Match(method, path)
		m2, ok2 := tab.Match(method, path)
		if ok1 != ok2 || m1 != m2 {
			t.Fatalf("unstable: %+v %v then %+v %v", m1, ok1, m2, ok2)
		}
		want := refMatch(testSpecs, method, path)
		got := -1
		if ok1 {
			got = m1.Index
			if m1.Name != testSpecs[got].Name || m1.Template != testSpecs[got].Path {
				t.Fatalf("match %+v inconsistent with spec %d", m1, got)
			}
		}
		if got != want {
			t.Fatalf("Match(%q, %q) = %d, reference %d", method, path, got, want)
		}
		// The canonical form is a fixpoint: the path spelled canonically
		// matches what the path itself matched.
		p, _, _ := strings.Cut(path, "?")
		if segs, ok := refSegments(p); ok && len(segs) > 0 {
			var b strings.Builder
			for _, s := range segs {
				b.WriteString("/" + url.PathEscape(s))
			}
			mc, okc := tab.Match(method, b.String())
			if okc != ok1 || mc != m1 {
				t.Fatalf("Match(%q) = %+v, %v but its canonical spelling %q = %+v, %v", path, m1, ok1, b.String(), mc, okc)
			}
		}
	})
}

// refMatch is the reference: the first spec (then the first GET spec for
// HEAD) whose template matches the decoded segments of path, or -1.
func refMatch(specs []Spec, method, path string) int {
	path, _, _ = strings.Cut(path, "?")
	segs, ok := refSegments(path)
	if !ok {
		return -1
	}
	dropped, front := refFrontController(segs)
	for _, m := range []string{method, "GET"} {
		for i, s := range specs {
			if s.Method == m && (refTemplateMatches(s.Path, segs) || front && refTemplateMatches(s.Path, dropped)) {
				return i
			}
		}
		if method != "HEAD" {
			break
		}
	}
	return -1
}

const refPathChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~!$&'()*+,;=:@[]%"

// refSegments splits and decodes path, or reports false if it must match
// nothing.
func refSegments(path string) ([]string, bool) {
	if !strings.HasPrefix(path, "/") || len(path) > MaxPathLength {
		return nil, false
	}
	if path == "/" {
		return nil, true
	}
	parts := strings.Split(path[1:], "/")
	if len(parts) > MaxSegments {
		return nil, false
	}
	for i, p := range parts {
		if p == "" {
			return nil, false
		}
		for _, c := range []byte(p) {
			if !strings.ContainsRune(refPathChars, rune(c)) {
				return nil, false
			}
		}
		d, err := url.PathUnescape(p)
		if err != nil || strings.ContainsAny(d, "/\\") {
			return nil, false
		}
		for _, c := range []byte(d) {
			if c < 0x20 || c == 0x7f {
				return nil, false
			}
		}
		c, ok := refCanon(d)
		if !ok {
			return nil, false
		}
		parts[i] = c
	}
	return parts, true
}

var refEscape = regexp.MustCompile(`%[0-9A-Fa-f]{2}|%[uU][0-9A-Fa-f]{4}`)

// refCanon is the reference of canonSegment and foldUnicode, on strings.
func refCanon(d string) (string, bool) {
	if strings.IndexFunc(d, func(r rune) bool { return r >= utf8.RuneSelf }) >= 0 {
		if !utf8.ValidString(d) {
			return "", false
		}
		var b strings.Builder
		for _, r := range norm.NFKD.String(d) {
			switch {
			case unicode.IsControl(r):
				return "", false
			case unicode.In(r, unicode.Mn, unicode.Me, unicode.Cf, unicode.Variation_Selector, unicode.Other_Default_Ignorable_Code_Point):
			case unicode.IsSpace(r):
				b.WriteByte(' ')
			case r == 'ß' || r == 'ẞ':
				b.WriteString("ss")
			default:
				b.WriteRune(unicode.ToLower(unicode.ToUpper(r)))
			}
		}
		d = b.String()
		if strings.ContainsAny(d, "/\\") {
			return "", false
		}
	}
	if refEscape.MatchString(d) {
		return "", false
	}
	d, _, _ = strings.Cut(d, ";")
	if strings.Trim(d, ". ") == "" {
		return "", false
	}
	d = strings.TrimRight(strings.TrimLeft(d, " "), " .")
	return strings.Map(func(r rune) rune {
		if 'A' <= r && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return r
	}, d), true
}

func refTemplateMatches(template string, segs []string) bool {
	if template == "/" {
		return len(segs) == 0
	}
	tsegs := strings.Split(template[1:], "/")
	for i, ts := range tsegs {
		switch {
		case strings.HasSuffix(ts, "...}"):
			return len(segs) > i
		case strings.HasPrefix(ts, "{"):
			if i >= len(segs) {
				return false
			}
		default:
			lit := strings.ToLower(ts)
			if i >= len(segs) || segs[i] != lit && !(i == len(tsegs)-1 && refFormatStem(segs[i], lit)) {
				return false
			}
		}
	}
	return len(segs) == len(tsegs)
}

// refFrontController returns segs without the first segment but the last
// that names a PHP script ("index.php"), and whether there is one: Laravel
// and Symfony route "/index.php/admin/users" as /admin/users.
func refFrontController(segs []string) ([]string, bool) {
	for i, s := range segs {
		if i < len(segs)-1 && len(s) > len(".php") && strings.HasSuffix(s, ".php") {
			return append(append([]string(nil), segs[:i]...), segs[i+1:]...), true
		}
	}
	return nil, false
}

// refFormatStem reports whether the last request segment seg is the literal
// lit with a format suffix ("users.json" for "users"), which Rails and
// Spring route to lit when lit has no ".".
func refFormatStem(seg, lit string) bool {
	stem, _, found := strings.Cut(seg, ".")
	return found && stem != "" && stem == lit && !strings.Contains(lit, ".")
}

// upstreamModels are ways real servers read a path segment (escaped, as
// sent): each returns the segment as that upstream compares it with its
// routes, whether the comparison ignores case, and false if it would not
// resolve the segment at all.
var upstreamModels = map[string]func(raw string) (seg string, foldCase, ok bool){
	"decode once": func(raw string) (string, bool, bool) {
		d, err := url.PathUnescape(raw)
		return d, false, err == nil
	},
	"servlet path parameters": func(raw string) (string, bool, bool) {
		raw, _, _ = strings.Cut(raw, ";")
		d, err := url.PathUnescape(raw)
		return d, false, err == nil
	},
	"decode, then drop path parameters": func(raw string) (string, bool, bool) {
		d, err := url.PathUnescape(raw)
		d, _, _ = strings.Cut(d, ";")
		return d, false, err == nil
	},
	"decode twice": func(raw string) (string, bool, bool) {
		d, err := url.PathUnescape(raw)
		if err != nil {
			return "", false, false
		}
		d, err = url.PathUnescape(d)
		return d, false, err == nil
	},
	"case-insensitive": func(raw string) (string, bool, bool) {
		d, err := url.PathUnescape(raw)
		return d, true, err == nil
	},
	"windows": func(raw string) (string, bool, bool) {
		d, err := url.PathUnescape(raw)
		return strings.TrimRight(d, " ."), true, err == nil
	},
	"trimming": func(raw string) (string, bool, bool) {
		d, err := url.PathUnescape(raw)
		return strings.TrimSpace(d), false, err == nil
	},
	"unicode best fit": func(raw string) (string, bool, bool) {
		d, err := url.PathUnescape(raw)
		d = strings.Map(func(r rune) rune {
			if unicode.Is(unicode.Cf, r) {
				return -1
			}
			return r
		}, norm.NFKC.String(d))
		return d, true, err == nil
	},
	"everything": func(raw string) (string, bool, bool) {
		raw, _, _ = strings.Cut(raw, ";")
		d, err := url.PathUnescape(raw)
		if err != nil {
			return "", false, false
		}
		if dd, err := url.PathUnescape(d); err == nil {
			d = dd
		}
		d = strings.Map(func(r rune) rune {
			if unicode.Is(unicode.Cf, r) {
				return -1
			}
			return r
		}, norm.NFKC.String(d))
		return strings.TrimRight(strings.TrimSpace(d), " ."), true, true
	},
}

// FuzzMatchNoEscape is the invariant of "one request, one route": when any
// upstream model resolves a path to a strict route of hostileSpecs, Match
// answers one of the strict routes some model resolves it to, or nothing;
// never the catch-all declared after them.
func FuzzMatchNoEscape(f *testing.F) {
	tab := mustTable(f, hostileSpecs)
	for _, seed := range []string{
		"/v1/transfers/1", "/v1/transfers;x=1/1", "/V1/Transfers/1", "/v1/%2574ransfers/1",
		"/v1/%EF%BD%94ransfers/1", "/v1/transfers%20/1", "/v1/transfers./1", "/ADMIN/users%E2%80%8B",
		"/v1/%2541ccounts/me", "/v1/reports/x", "/v1/thing%3Brun", "/admin/us%C3%A9rs", "/x/y/z",
		"/admin/users.json", "/v1/accounts/me.xml;x", "/v1/thing:run%2Ecsv",
		"/index.php/admin/users", "/v1/index.php/accounts/me",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, path string) {
		m, ok := tab.Match("GET", path)
		p, _, _ := strings.Cut(path, "?")
		if !strings.HasPrefix(p, "/") || p == "/" {
			return
		}
		resolved := map[int]string{}
		for name, model := range upstreamModels {
			// Each model also with a format suffix dropped from the last
			// segment, as Rails and Spring route "/admin/users.json", and
			// with a front controller's segment dropped, as Laravel and
			// Symfony route "/index.php/admin/users".
			for _, variant := range []string{"", "format suffix", "front controller"} {
				label := name
				var segs []string
				var fold bool
				for _, raw := range strings.Split(p[1:], "/") {
					seg, f, ok := model(raw)
					if !ok || seg == "" || strings.ContainsAny(seg, "/\\\\") {
						segs = nil
						break
					}
					segs, fold = append(segs, seg), f
				}
				if segs == nil {
					continue
				}
				switch variant {
				case "format suffix":
					last := &segs[len(segs)-1]
					stem, _, found := strings.Cut(*last, ".")
					if !found || stem == "" {
						continue
					}
					*last = stem
				case "front controller":
					var found bool
					if segs, found = refFrontController(segs); !found {
						continue
					}
				}
				if variant != "" {
					label = name + " with a " + variant
				}
				for i, s := range hostileSpecs[:catchAll] {
					if s.Method == "GET" && modelMatches(s.Path, segs, fold) {
						resolved[i] = label
						break
					}
				}
			}
		}
		if len(resolved) == 0 || !ok {
			return
		}
		if _, fine := resolved[m.Index]; !fine {
			t.Fatalf("Match(%q) = %s, but upstreams resolve it to %v", path, m.Name, resolved)
		}
	})
}

func modelMatches(template string, segs []string, fold bool) bool {
	tsegs := strings.Split(template[1:], "/")
	if len(tsegs) != len(segs) {
		return false
	}
	for i, ts := range tsegs {
		if strings.HasPrefix(ts, "{") {
			continue
		}
		if segs[i] != ts && !(fold && strings.EqualFold(segs[i], ts)) {
			return false
		}
	}
	return true
}
