package identity

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"
)

var hex16 = regexp.MustCompile(`^[0-9a-f]{16}$`)

// FuzzAuthenticate feeds arbitrary credential and forwarding headers. It
// must never panic, every error must be an ErrUnauthenticated with a reason,
// and only the two real credentials may yield a non-anonymous caller.
func FuzzAuthenticate(f *testing.F) {
	a := mustNew(f, testConfig())
	valid := sign(f, jwt.SigningMethodHS256, testSecret, claims(nil))
	for _, seed := range [][3]string{
		{"", "", ""},
		{"Bearer " + acmeKey, "", "198.51.100.9"},
		{"", acmeKey, "10.0.0.2, 198.51.100.9"},
		{"Bearer " + valid, "", ""},
		{"bearer " + valid, valid, "[2001:db8::1]:80"},
		{"Basic dXNlcjpwYXNz", "", ""},
		{"Bearer a.b.c", "a.b.c", ",,"},
		{"Bearer " + acmeKey + "\x00", "", "garbage"},
	} {
		f.Add(seed[0], seed[1], seed[2])
	}
	f.Fuzz(func(t *testing.T, authz, apiKey, xff string) {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = "10.0.0.1:4000" // trusted, so XFF is walked
		if authz != "" {
			r.Header["Authorization"] = []string{authz}
		}
		if apiKey != "" {
			r.Header["X-Api-Key"] = []string{apiKey}
		}
		r.Header["X-Forwarded-For"] = []string{xff}
		c, err := a.Authenticate(r)
		if err != nil {
			if !errors.Is(err, ErrUnauthenticated) || Reason(err) == "" {
				t.Fatalf("error %v is not an ErrUnauthenticated with a reason", err)
			}
			return
		}
		if !hex16.MatchString(c.ID) || c.Tier == "" || c.Tenant == "" {
			t.Fatalf("incomplete caller %+v", c)
		}
		wantSubject := map[Kind]string{KindAnonymous: c.Tenant, KindAPIKey: "key:" + c.Tenant, KindJWT: "jwt:" + c.Tenant}[c.Kind]
		if c.Subject != wantSubject {
			t.Fatalf("%v caller %+v: subject %q, want %q", c.Kind, c, c.Subject, wantSubject)
		}
		if c.Kind == KindAnonymous {
			if authz != "" || apiKey != "" {
				t.Fatalf("credential %q / %q downgraded to anonymous", authz, apiKey)
			}
			if !strings.HasPrefix(c.Tenant, "ip:") {
				t.Fatalf("anonymous tenant %q", c.Tenant)
			}
			return
		}
		presented := authz + "\n" + apiKey
		if !strings.Contains(presented, acmeKey) && !strings.Contains(presented, globexKey) && !strings.Contains(presented, valid) {
			t.Fatalf("%v caller %+v from credential %q / %q", c.Kind, c, authz, apiKey)
		}
	})
}
