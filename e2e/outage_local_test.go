package e2e

import (
	"regexp"
	"sort"
	"strconv"
	"testing"

	"github.com/quotagate/quotagate/internal/proctest"
)

// policyQuotaRE reads q of the RateLimit-Policy header.
var policyQuotaRE = regexp.MustCompile(`^"[^"]*";q=(\d+)`)

// localTally counts the answers of the /local route of the outage scenario
// for one tenant, by what decided them: Redis (RateLimit-Policy advertises
// the burst, localBurst) or the fallback (it advertises this instance's
// share, localShare).
type localTally struct {
	store, fallback map[int]int // by status
}

// tallyLocal sorts the answered outcomes of /local by tenant (API key)
// and decider. An answer that advertises neither the burst nor the share
// fails t: it says nothing of what decided it.
func tallyLocal(t *testing.T, outs []outcome) map[string]*localTally {
	t.Helper()
	by := map[string]*localTally{}
	bad := 0
	for _, o := range outs {
		if o.label != "local" || o.status == 0 {
			continue
		}
		lt := by[o.key]
		if lt == nil {
			lt = &localTally{store: map[int]int{}, fallback: map[int]int{}}
			by[o.key] = lt
		}
		m := policyQuotaRE.FindStringSubmatch(o.header.Get("RateLimit-Policy"))
		q := -1
		if m != nil {
			q, _ = strconv.Atoi(m[1])
		}
		switch q {
		case localBurst:
			lt.store[o.status]++
		case localShare:
			lt.fallback[o.status]++
		default:
			if bad++; bad == 1 {
				t.Errorf("/local answered %d with RateLimit-Policy %q, want q=%d (Redis decided) or q=%d (the local share)",
					o.status, o.header.Get("RateLimit-Policy"), localBurst, localShare)
			}
		}
	}
	return by
}

// checkLocalShares asserts what on_store_error local promises over the
// whole run, tenant by tenant: the fallback admits at most the tenant's
// share (exactly the share once it has denied the tenant), Redis at most
// the limit per store fill, and the fallback metric counts the admissions
// the clients saw. The fault tenant, sent only while the fault lasts, must
// have used up its share and been denied by the fallback. Store failures
// outside the fault (a healthy store that missed its deadline on a busy
// machine) put other tenants on their shares as well: that is the product
// working, not over-admission.
func checkLocalShares(t *testing.T, gw *gateway, outs []outcome, storeFills int) {
	t.Helper()
	tenants := tallyLocal(t, outs)
	keys := make([]string, 0, len(tenants))
	seen := 0
	for k, lt := range tenants {
		keys = append(keys, k)
		seen += lt.fallback[200]
	}
	sort.Strings(keys)
	for _, k := range keys {
		lt := tenants[k]
		if f := lt.fallback[200]; f > localShare || lt.fallback[429] > 0 && f != localShare {
			t.Errorf("tenant %s: the fallback admitted %d and denied %d, want at most its share %d, and exactly the share once it denies",
				k, f, lt.fallback[429], localShare)
		}
		if s := lt.store[200]; s > localBurst*storeFills {
			t.Errorf("tenant %s: Redis admitted %d, over its limit %d per store fill (%d fills)", k, s, localBurst, storeFills)
		}
	}
	// Only answers the fallback gave count toward using up the share:
	// the fault tenant's answers from Redis (before the fault took effect
	// and after it healed) do not.
	ft, n := tenants["key-fault"], 0
	if ft != nil {
		for _, c := range ft.fallback {
			n += c
		}
	}
	switch {
	case n <= localShare:
		proctest.Overrun(t, "the fallback decided %d of the fault tenant's requests, too few to use up its share %d", n, localShare)
	case ft.fallback[429] == 0:
		t.Errorf("the fault tenant: the fallback decided %d requests, admitted %d and never denied, want its share %d and then 429",
			n, ft.fallback[200], localShare)
	}
	if n := gw.metric("quotagate_decisions_total", "policy=p_local", "stage=fallback", "result=allowed"); n != float64(seen) {
		t.Errorf("quotagate_decisions_total{policy=p_local,stage=fallback,result=allowed} = %v, want the %d admissions of the share the clients saw", n, seen)
	}
}
