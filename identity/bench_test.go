package identity

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/golang-jwt/jwt/v5"
)

func BenchmarkAuthenticate(b *testing.B) {
	a := mustNew(b, testConfig())
	for _, bc := range []struct{ name, authz string }{
		{"api_key", "Bearer " + acmeKey},
		{"jwt", "Bearer " + sign(b, jwt.SigningMethodHS256, testSecret, claims(nil))},
		{"anonymous", ""},
	} {
		b.Run(bc.name, func(b *testing.B) {
			r := httptest.NewRequest(http.MethodGet, "/v1/transfers/42", nil)
			r.RemoteAddr = "10.0.0.1:4000"
			r.Header.Set("X-Forwarded-For", "198.51.100.9")
			if bc.authz != "" {
				r.Header.Set("Authorization", bc.authz)
			}
			if _, err := a.Authenticate(r); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := a.Authenticate(r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
