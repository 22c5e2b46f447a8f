package gateway

import (
	"strconv"
	"testing"

	"github.com/quotagate/quotagate/routes"
)

// TestSubjectIDPrecomputed checks that the SubjectIDs hashed when the
// pipeline is built are those routes.NewSubjectID gives, so that a caller
// with an API key keeps the bucket keys it had when its subject was hashed
// per request, and that subjects of other callers are hashed as before.
func TestSubjectIDPrecomputed(t *testing.T) {
	gw := benchGateway(t, 3)
	p := gw.live.Load()
	if len(p.subjectIDs) != 3 {
		t.Fatalf("%d subjects precomputed, want the 3 keys' ones", len(p.subjectIDs))
	}
	for i := range 3 {
		s := "key:t" + strconv.Itoa(i)
		if _, ok := p.subjectIDs[s]; !ok {
			t.Errorf("subject %q of a configured key is not precomputed", s)
		}
		if got, want := p.subjectID(s), routes.NewSubjectID(s); got != want {
			t.Errorf("subjectID(%q) = %q, want %q", s, got, want)
		}
	}
	for _, s := range []string{"jwt:t0", "ip:203.0.113.7", "key:unknown", ""} {
		if got, want := p.subjectID(s), routes.NewSubjectID(s); got != want {
			t.Errorf("subjectID(%q) = %q, want %q", s, got, want)
		}
	}
}
