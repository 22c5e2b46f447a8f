package routes

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// hostileSpecs has strict routes and, declared last, a generous catch-all:
// the shape where a spelling the matcher misreads escapes the strict
// routes' limits.
var hostileSpecs = []Spec{
	0: {Name: "transfers.get", Method: "GET", Path: "/v1/transfers/{id}"},
	1: {Name: "transfers.create", Method: "POST", Path: "/v1/transfers/{id}"},
	2: {Name: "accounts.me", Method: "GET", Path: "/v1/accounts/me"},
	3: {Name: "admin.users", Method: "GET", Path: "/admin/users"},
	4: {Name: "thing.run", Method: "GET", Path: "/v1/thing:run"},
	5: {Name: "reports.get", Method: "GET", Path: "/v1/Reports/{id}"},
	6: {Name: "class", Method: "GET", Path: "/v1/class/{id}"},
	7: {Name: "rest", Method: "GET", Path: "/{rest...}"},
}

const catchAll = 7

// TestMatchHostileSpellings lists every class of spelling that an upstream
// may resolve to a strict route: each matches that route (the request is
// charged there) or matches nothing (404), and none reaches the catch-all.
// A few spellings no upstream folds into a literal do reach the catch-all,
// and are listed to pin that down.
func TestMatchHostileSpellings(t *testing.T) {
	tab := mustTable(t, hostileSpecs)
	const none = -1
	tests := []struct {
		class, path string
		want        int
	}{
		// Ordinary requests.
		{"plain", "/v1/transfers/1", 0},
		{"plain", "/v1/other/1", catchAll},
		{"plain", "/v1/transfers/caf%C3%A9", 0},
		{"plain", "/v1/transfers/100%25", 0},
		{"plain", "/v1/transfers/50%25off", 0},

		// Path parameters: dropped from the first ";" of a segment.
		{"params", "/v1/transfers;x=1/1", 0},
		{"params", "/v1/transfers;/1", 0},
		{"params", "/v1/transfers;jsessionid=abc/1", 0},
		{"params", "/v1;x/transfers/1", 0},
		{"params", "/v1/transfers%3Bx=1/1", 0},
		{"params", "/v1/transfers%EF%BC%9Bx/1", 0}, // full-width ";"
		{"params", "/v1/transfers/1;x", 0},
		{"params", "/v1/;x/transfers/1", none},
		{"params", "/v1/transfers/;x", none},
		{"params", "/v1/..;/admin/users", none},
		{"params", "/v1/.;x/transfers/1", none},

		// Case of literal segments.
		{"case", "/V1/Transfers/1", 0},
		{"case", "/V1/TRANSFERS/1", 0},
		{"case", "/v1/Accounts/ME", 2},
		{"case", "/ADMIN/Users", 3},
		{"case", "/v1/THING:RUN", 4},
		{"case", "/v1/reports/1", 5},
		{"case", "/v1/REPORTS/1", 5},
		{"case", "/v1/%41ccounts/me", 2},

		// Double (and deeper) encoding: an escape left after one decoding.
		{"double encoding", "/v1/%2574ransfers/1", none},
		{"double encoding", "/v1/%252574ransfers/1", none},
		{"double encoding", "/v1/%25%37%34ransfers/1", none},
		{"double encoding", "/admin%252Fusers", none},
		{"double encoding", "/v1/transfers/100%2541", none},
		{"double encoding", "/v1/%25u0074ransfers/1", none},    // IIS %u after one decoding
		{"double encoding", "/v1/%u0074ransfers/1", none},      // IIS %u: invalid escape
		{"double encoding", "/v1/%EF%BC%8574ransfers/1", none}, // full-width "%"

		// Non-ASCII compatibility forms and case.
		{"non-ASCII", "/v1/%EF%BD%94ransfers/1", 0},                      // full-width t
		{"non-ASCII", "/%EF%BD%96%EF%BC%91/transfers/1", 0},              // full-width v1
		{"non-ASCII", "/v1/%EF%BC%B4RANSFERS/1", 0},                      // full-width T
		{"non-ASCII", "/v1/%F0%9D%90%ADransfers/1", 0},                   // mathematical bold t
		{"non-ASCII", "/v1/%E2%93%A3ransfers/1", 0},                      // circled t
		{"non-ASCII", "/admin/u%C5%BFers", 3},                            // long s
		{"non-ASCII", "/adm%C4%B1n/users", 3},                            // dotless i
		{"non-ASCII", "/ADM%C4%B0N/users", 3},                            // dotted capital I
		{"non-ASCII", "/v1/cla%C3%9F/1", 6},                              // sharp s
		{"non-ASCII", "/v1/tr%C3%A1nsfers/1", 0},                         // precomposed accent
		{"non-ASCII", "/v1/tra%CC%81nsfers/1", 0},                        // combining accent
		{"non-ASCII", "/v1/trans%C2%ADfers/1", 0},                        // soft hyphen
		{"non-ASCII", "/v1/transfers%E2%80%8B/1", 0},                     // zero-width space
		{"non-ASCII", "/v1/transfers%E2%80%AE/1", 0},                     // right-to-left override
		{"non-ASCII", "/v1/transfers%EF%B8%8F/1", 0},                     // variation selector
		{"non-ASCII", "/v1/transfers%EF%BB%BF/1", 0},                     // byte order mark
		{"non-ASCII", "/v1%EF%BC%8Ftransfers/1", none},                   // full-width "/"
		{"non-ASCII", "/v1%EF%BC%BCtransfers/1", none},                   // full-width "\"
		{"non-ASCII", "/v1/%EF%BC%8E%EF%BC%8E/admin/users", none},        // full-width ".."
		{"non-ASCII", "/v1/%E2%80%A5/admin/users", none},                 // two dot leader
		{"non-ASCII", "/v1/%E2%80%A6", none},                             // ellipsis: "..."
		{"non-ASCII", "/v1/transfers%C2%85/1", none},                     // C1 control (NEL)
		{"non-ASCII", "/v1/%CC%81/1", none},                              // only a mark: empty
		{"non-ASCII", "/v1/%D1%82ransfers/1", catchAll},                  // Cyrillic te: another letter
		{"non-ASCII", "/v1/transfers/%E4%BD%A0%E5%A5%BD", 0},             // a parameter
		{"non-ASCII", "/v1/files/%EF%BD%86%EF%BD%8F%EF%BD%8F", catchAll}, // no literal here

		// Invalid UTF-8, overlong forms, surrogates.
		{"UTF-8", "/v1/%C0%AE%C0%AE/admin/users", none},
		{"UTF-8", "/v1/transfers%C0%AF1", none},
		{"UTF-8", "/v1/%E0%80%AE/1", none},
		{"UTF-8", "/v1/transfers/%ED%A0%80", none},
		{"UTF-8", "/v1/transfers/%FF", none},
		{"UTF-8", "/v1/transfers/%E2%80", none},

		// Whitespace and control characters.
		{"whitespace", "/v1/transfers%20/1", 0},
		{"whitespace", "/v1/%20transfers/1", 0},
		{"whitespace", "/v1/transfers%20%20/1", 0},
		{"whitespace", "/v1/transfers%C2%A0/1", 0},    // no-break space
		{"whitespace", "/v1/transfers%E3%80%80/1", 0}, // ideographic space
		{"whitespace", "/v1/transfers/%20", none},
		{"whitespace", "/v1/trans%20fers/1", catchAll}, // inner space: another name
		{"whitespace", "/v1/transfers+/1", catchAll},   // "+" is not a space in a path
		{"control", "/v1/transfers%09/1", none},
		{"control", "/v1/transfers%0D%0A/1", none},
		{"control", "/v1/transfers%0B/1", none},
		{"control", "/v1/transfers%00/1", none},
		{"control", "/v1/transfers%7F/1", none},
		{"control", "/v1/transfers\t/1", none},
		{"control", "/v1/transfers /1", none},

		// Trailing dots.
		{"dots", "/v1/transfers./1", 0},
		{"dots", "/v1/transfers../1", 0},
		{"dots", "/v1/transfers.%20./1", 0},
		{"dots", "/v1/transfers%2E/1", 0},
		{"dots", "/v1/transfers/1.", 0},
		{"dots", "/v1/transfers/...", none},
		{"dots", "/v1/transfers/.", none},
		{"dots", "/v1/transfers/%2e%20", none},
		{"dots", "/v1/./transfers/1", none},
		{"dots", "/v1/x/../transfers/1", none},

		// Slashes and backslashes.
		{"slashes", "/v1\\transfers/1", none},
		{"slashes", "/v1%5Ctransfers/1", none},
		{"slashes", "/v1%2Ftransfers/1", none},
		{"slashes", "//v1/transfers/1", none},
		{"slashes", "/v1//transfers/1", none},
		{"slashes", "/v1/transfers/1/", none},

		// Format suffixes: Rails routes "/admin/users.json" as /admin/users
		// with format json, and Spring (suffix pattern matching) serves any
		// "/admin/users.*" there, so the last segment's part before its first
		// "." matches a literal without a ".".
		{"format suffix", "/admin/users.json", 3},
		{"format suffix", "/v1/accounts/ME.json", 2},
		{"format suffix", "/admin/users.tar.gz", 3},
		{"format suffix", "/admin/users.JSON;x", 3},
		{"format suffix", "/admin/users%2Ejson", 3},
		{"format suffix", "/admin/users.%20json", 3},
		{"format suffix", "/v1/thing:run.xml", 4},
		{"format suffix", "/admin/users%EF%BC%8Ejson", 3}, // full-width "."
		{"format suffix", "/v1/transfers/1.json", 0},      // a parameter takes it whole
		{"format suffix", "/admin.json/users", catchAll},  // only the last segment
		{"format suffix", "/v1/transfers.json/1", catchAll},
		{"format suffix", "/admin/.json", catchAll},
		{"format suffix", "/admin/users-x.json", catchAll},

		// Front controllers: Laravel and Symfony route
		// "/index.php/admin/users" as /admin/users (the script name is the
		// base URL, the rest is the path), so a path is also matched without
		// its first segment but the last that ends in ".php".
		{"front controller", "/index.php/admin/users", 3},
		{"front controller", "/index.php/v1/transfers/1", 0},
		{"front controller", "/INDEX.PHP/v1/accounts/me", 2},
		{"front controller", "/index%2Ephp/admin/users", 3},
		{"front controller", "/app.php/admin/users.json", 3},
		{"front controller", "/v1/index.php/accounts/me", 2}, // an application below /v1
		{"front controller", "/v1/accounts/index.php/me", 2},
		{"front controller", "/index.php/index.php/admin/users", catchAll}, // only the first
		{"front controller", "/.php/admin/users", catchAll},
		{"front controller", "/index.php", catchAll},
		{"front controller", "/admin/users/x.php", catchAll}, // a last segment is no script
		{"front controller", "/index.phpx/admin/users", catchAll},

		// Several at once.
		{"mixed", "/V1/%EF%BD%94RANSFERS%20;a/1", 0},
		{"mixed", "/v1/%54ransfers.;x/1", 0},
		{"mixed", "/v1/Transfers%2574/1", none},
	}
	for _, tt := range tests {
		method := "GET"
		m, ok := tab.Match(method, tt.path)
		got := none
		if ok {
			got = m.Index
		}
		if got != tt.want {
			t.Errorf("%s: Match(%q) = %d, want %d", tt.class, tt.path, got, tt.want)
		}
	}
	// Methods still select among routes of one canonical template.
	if m, ok := tab.Match("POST", "/V1/Transfers;x/1"); !ok || m.Index != 1 {
		t.Errorf("POST /V1/Transfers;x/1 = %+v, %v; want transfers.create", m, ok)
	}
}

// TestFoldUnicode pins the Unicode fold of single segments.
func TestFoldUnicode(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"ｔｒａｎｓｆｅｒｓ", "transfers"},
		{"ＴＲＡＮＳＦＥＲＳ", "transfers"},
		{"straße", "strasse"},
		{"STRAẞE", "strasse"},
		{"\u212Aey", "key"}, // Kelvin sign
		{"ﬁle", "file"},
		{"⑽", "(10)"},
		{"café", "cafe"},
		{"\u00ADa\u200Db\uFEFF", "ab"},
		{"a\u3000b", "a b"},
		{"日本", "日本"},
		{"ОТВЕТ", "ответ"}, // Cyrillic stays Cyrillic
	} {
		buf := make([]byte, MaxPathLength)
		n := copy(buf, tt.in)
		end, ok := foldUnicode(buf, 0, n)
		if !ok || string(buf[:end]) != tt.want {
			t.Errorf("fold(%q) = %q, %v; want %q", tt.in, buf[:end], ok, tt.want)
		}
	}
	for _, in := range []string{"\xc0\xae", "a\u0085", "\xed\xa0\x80"} {
		buf := make([]byte, MaxPathLength)
		n := copy(buf, in)
		if _, ok := foldUnicode(buf, 0, n); ok {
			t.Errorf("fold(%q) succeeded, want refused", in)
		}
	}
	// A fold longer than the room left is refused, not written past buf.
	buf := []byte("⑽⑽⑽") // 9 bytes, folds to 12
	n := len(buf)
	if _, ok := foldUnicode(buf, 0, n); ok {
		t.Error("fold past the end of buf succeeded")
	}
}

// TestMatchFoldCannotOverflow sends a path whose segments all grow when
// folded, up to the length limit.
func TestMatchFoldCannotOverflow(t *testing.T) {
	tab := mustTable(t, hostileSpecs)
	seg := strings.Repeat("%EF%B7%BA", 20) // U+FDFA is 3 bytes, folds to over 30
	p := strings.Repeat("/"+seg, MaxPathLength/(len(seg)+1))
	if _, ok := tab.Match("GET", p); ok {
		t.Errorf("a path folding past %d bytes matched", MaxPathLength)
	}
	p = "/" + strings.Repeat("%E2%91%BD", (MaxPathLength-1)/9)
	if _, ok := tab.Match("GET", p); !ok {
		t.Errorf("a long folded single segment did not match the catch-all")
	}
}

// TestFoldIsIdempotent folds every rune of the Basic Multilingual Plane and
// of the supplementary blocks of letter-like symbols (mathematical
// alphanumerics, enclosed alphanumerics) twice: a canonical form must be
// its own canonical form, or a path and its canonical spelling could match
// different routes.
func TestFoldIsIdempotent(t *testing.T) {
	if testing.Short() {
		t.Skip("folds 70,000 runes")
	}
	buf := make([]byte, 64)
	check := func(lo, hi rune) {
		for r := lo; r <= hi; r++ {
			if !utf8.ValidRune(r) {
				continue
			}
			end, ok := foldUnicode(buf, 0, utf8.EncodeRune(buf, r))
			if !ok {
				continue
			}
			once := string(buf[:end])
			end, ok = foldUnicode(buf, 0, copy(buf, once))
			if !ok || string(buf[:end]) != once {
				t.Errorf("%U folds to %q, which folds to %q (%v)", r, once, buf[:end], ok)
			}
		}
	}
	check(0x80, 0xFFFF)
	check(0x1D400, 0x1D7FF)
	check(0x1F100, 0x1F1FF)
}
