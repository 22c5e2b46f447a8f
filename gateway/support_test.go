package gateway

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/ratelimit/memstore"
	"github.com/quotagate/quotagate/ratelimit/stack"
	"github.com/quotagate/quotagate/telemetry"
)

// lockedLog is a log sink safe for the gateway's goroutines and the test.
type lockedLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// records returns the JSON log records whose msg is msg.
func (l *lockedLog) records(t *testing.T, msg string) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(l.b.String()), "\n") {
		var rec map[string]any
		if line == "" {
			continue
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// supportFixture is a gateway on base with the admin token TEST_ADMIN_TOKEN,
// real metrics and a JSON log, its admin handler called in-process (the
// store and stage 1 on the fixture's clock).
type supportFixture struct {
	*observed
	admin  http.Handler
	log    *lockedLog
	memory *memstore.Store // the stack's backend
}

func newSupportFixture(t *testing.T, base string) *supportFixture {
	t.Helper()
	f := &fixture{clock: newTestClock(), upstream: newUpstream(t)}
	text := strings.Replace(base, "server:\n", "server:\n  admin_token_env: TEST_ADMIN_TOKEN\n", 1)
	f.path = writeConfig(t, renderConfig(text, f.upstream.srv.URL, deadURL(t)))
	cfg, err := config.Load(f.path, adminEnv)
	if err != nil {
		t.Fatal(err)
	}
	tel, m := newTestMetrics(t)
	sf := &supportFixture{log: &lockedLog{}}
	gw, err := New(cfg, Options{Now: f.clock.Now, Getenv: adminEnv, Metrics: m,
		Logger: slog.New(slog.NewJSONHandler(sf.log, &slog.HandlerOptions{Level: slog.LevelInfo})),
		OpenStore: func(c config.Store) (*stack.Stack, error) {
			sf.memory = memstore.New(memstore.Options{Now: f.clock.Now})
			return stack.New(sf.memory, stack.Options{Now: f.clock.Now, FleetSize: c.FleetSize}), nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw.Close() })
	f.gw = gw
	sf.observed = &observed{fixture: f, metrics: tel.Metrics}
	sf.admin = gw.Admin(tel.Metrics)
	return sf
}

// post sends body (a JSON value, or a string sent as is) to an admin path
// with the admin token and the content type given.
func (s *supportFixture) post(path, contentType string, body any, token string) *httptest.ResponseRecorder {
	var b []byte
	switch v := body.(type) {
	case string:
		b = []byte(v)
	default:
		b, _ = json.Marshal(v)
	}
	r := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(b))
	r.RemoteAddr = "127.0.0.1:50000"
	if contentType != "" {
		r.Header.Set("Content-Type", contentType)
	}
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	w := httptest.NewRecorder()
	s.admin.ServeHTTP(w, r)
	return w
}

// lookup looks who up and returns the reply; anything but 200 fails.
func (s *supportFixture) lookup(t *testing.T, who supportWho) (lookupReply, map[string]quotaPolicy) {
	t.Helper()
	w := s.post("/console/lookup", "application/json", who, adminToken)
	if w.Code != http.StatusOK {
		t.Fatalf("lookup %+v: %d %s", who, w.Code, w.Body.String())
	}
	var rep lookupReply
	if err := json.Unmarshal(w.Body.Bytes(), &rep); err != nil {
		t.Fatalf("lookup body %s: %v", w.Body.String(), err)
	}
	by := map[string]quotaPolicy{}
	for _, p := range rep.Policies {
		by[p.Name+"/"+p.Route] = p
	}
	return rep, by
}

// act posts an action and returns its answer.
func (s *supportFixture) act(action string, a supportAction) *httptest.ResponseRecorder {
	return s.post("/console/"+action, "application/json", a, adminToken)
}

// actions returns quotagate_console_actions_total by "action/result".
func (s *supportFixture) actions(t *testing.T) map[string]float64 {
	t.Helper()
	fam := s.scrape(t)["quotagate_console_actions_total"]
	if fam == nil {
		t.Fatal("quotagate_console_actions_total is not exported")
	}
	out := map[string]float64{}
	for _, m := range fam.GetMetric() {
		var action, result string
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "action":
				action = l.GetValue()
			case "result":
				result = l.GetValue()
			}
		}
		out[action+"/"+result] = m.GetCounter().GetValue()
	}
	return out
}

// wantActions checks the counter's series: want's, and 0 for the others
// of the six.
func (s *supportFixture) wantActions(t *testing.T, what string, want map[string]float64) {
	t.Helper()
	got := s.actions(t)
	if len(got) != 6 {
		t.Errorf("%s: %d series %v, want the 6 of 2 actions by 3 results", what, len(got), got)
	}
	for _, a := range []string{"grant", "reset"} {
		for _, r := range []string{"applied", "refused", "failed"} {
			if k := a + "/" + r; got[k] != want[k] {
				t.Errorf("%s: quotagate_console_actions_total{%s} = %v, want %v", what, k, got[k], want[k])
			}
		}
	}
}

// TestConsoleSupportNeedsTheAdminToken: the history, the lookup and both
// actions answer 401 without the admin token or with a wrong one, change
// nothing and count nothing; with it they answer.
func TestConsoleSupportNeedsTheAdminToken(t *testing.T) {
	s := newSupportFixture(t, baseConfig)
	for range 2 {
		s.do("GET", "/v1/transfers/1", bearer(freeKey), nil)
	}
	grant := supportAction{supportWho: supportWho{Tenant: "acme"}, Policy: "tenant", Units: 2, Reason: "ticket 1"}
	for _, token := range []string{"", "wrong-token"} {
		for _, path := range []string{"/console/lookup", "/console/grant", "/console/reset"} {
			if w := s.post(path, "application/json", grant, token); w.Code != http.StatusUnauthorized {
				t.Errorf("POST %s with token %q: %d %s, want 401", path, token, w.Code, w.Body.String())
			}
		}
		r := httptest.NewRequest(http.MethodGet, "/console/history", nil)
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		w := httptest.NewRecorder()
		s.admin.ServeHTTP(w, r)
		if w.Code != http.StatusUnauthorized {
			t.Errorf("GET /console/history with token %q: %d, want 401", token, w.Code)
		}
	}
	s.wantActions(t, "after unauthenticated actions", nil)
	if _, by := s.lookup(t, supportWho{Tenant: "acme"}); by["tenant/"].Remaining != 3 {
		t.Errorf("tenant remaining %d after 2 requests and refused grants, want 3", by["tenant/"].Remaining)
	}
	r := httptest.NewRequest(http.MethodGet, "/console/history", nil)
	r.Header.Set("Authorization", "Bearer "+adminToken)
	w := httptest.NewRecorder()
	s.admin.ServeHTTP(w, r)
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"decisions_per_s":[]`) {
		t.Errorf("GET /console/history with the token: %d %s, want 200 and no points yet", w.Code, w.Body.String())
	}
}

// TestConsoleActionsAreRefusedWithoutJSONOrReason: an action sent as a
// form (what a cross-site page can send), as JSON with no reason, a blank
// one, an unknown member, an unknown tenant or policy, a concurrency
// policy, a per-route policy without its route, or units out of range is
// 400, changes nothing, logs nothing and counts as refused.
func TestConsoleActionsAreRefusedWithoutJSONOrReason(t *testing.T) {
	withSlots := strings.Replace(baseConfig, "routes:\n", "routes:\n  - {name: busy.get, method: GET, path: \"/v1/busy\", upstream: payments, policies: [inflight]}\n", 1)
	s := newSupportFixture(t, withSlots)
	for range 5 {
		s.do("GET", "/v1/transfers/1", bearer(freeKey), nil)
	}
	acme := supportWho{Tenant: "acme"}
	cases := []struct {
		name, path, ctype string
		body              any
		want              string
	}{
		{"form", "/console/grant", "application/x-www-form-urlencoded", "tenant=acme&policy=tenant&units=5&reason=x", "application/json"},
		{"text", "/console/reset", "text/plain", `{"tenant":"acme","policy":"tenant","reason":"x"}`, "application/json"},
		{"no reason", "/console/grant", "application/json", supportAction{supportWho: acme, Policy: "tenant", Units: 5}, "reason"},
		{"blank reason", "/console/reset", "application/json", supportAction{supportWho: acme, Policy: "tenant", Reason: " \t "}, "reason"},
		{"multi-line reason", "/console/reset", "application/json", supportAction{supportWho: acme, Policy: "tenant", Reason: "a\nb"}, "one line"},
		{"unknown member", "/console/grant", "application/json", `{"tenant":"acme","policy":"tenant","units":5,"reason":"x","force":true}`, "force"},
		{"unknown tenant", "/console/grant", "application/json", supportAction{supportWho: supportWho{Tenant: "nobody", Kind: "api_key"}, Policy: "tenant", Units: 5, Reason: "x"}, "nobody"},
		{"unknown policy", "/console/grant", "application/json", supportAction{supportWho: acme, Policy: "nope", Units: 5, Reason: "x"}, "nope"},
		{"concurrency", "/console/reset", "application/json", supportAction{supportWho: acme, Policy: "inflight", Reason: "x"}, "slots"},
		{"per route, no route", "/console/reset", "application/json", supportAction{supportWho: supportWho{Credential: enterpriseKey}, Policy: "transfers", Reason: "x"}, "transfers.create"},
		{"no units", "/console/grant", "application/json", supportAction{supportWho: acme, Policy: "tenant", Reason: "x"}, "units"},
		{"negative units", "/console/grant", "application/json", supportAction{supportWho: acme, Policy: "tenant", Units: -3, Reason: "x"}, "units"},
		{"reset with units", "/console/reset", "application/json", supportAction{supportWho: acme, Policy: "tenant", Units: 3, Reason: "x"}, "units"},
		{"bad credential", "/console/grant", "application/json", supportAction{supportWho: supportWho{Credential: "not-a-key"}, Policy: "tenant", Units: 1, Reason: "x"}, "unknown api key"},
	}
	refused := map[string]float64{}
	for _, c := range cases {
		w := s.post(c.path, c.ctype, c.body, adminToken)
		var p problem
		if w.Code != http.StatusBadRequest || json.Unmarshal(w.Body.Bytes(), &p) != nil || p.Error != codeBadRequest || !strings.Contains(p.Message, c.want) {
			t.Errorf("%s: %d %s, want 400 bad_request mentioning %q", c.name, w.Code, w.Body.String(), c.want)
		}
		refused[strings.TrimPrefix(c.path, "/console/")+"/refused"]++
	}
	s.wantActions(t, "after refused actions", refused)
	if _, by := s.lookup(t, supportWho{Tenant: "acme"}); by["tenant/"].Remaining != 0 {
		t.Errorf("tenant remaining %d after refused actions, want 0", by["tenant/"].Remaining)
	}
	if recs := s.log.records(t, "console action"); len(recs) != 0 {
		t.Errorf("refused actions were logged as taken: %v", recs)
	}
}

// TestConsoleGrantAndResetShowInTheNextLookup: a tenant (acme, free:
// tenant 5 at 1/s; the clock stands still) spends its burst; a grant of 3
// shows as 3 remaining in the next lookup and lets 3 requests through; a
// reset fills the key, per-route keys by their route; each is logged at
// Warn with its reason and counted as applied, and the log holds no
// credential.
func TestConsoleGrantAndResetShowInTheNextLookup(t *testing.T) {
	s := newSupportFixture(t, baseConfig)
	for i := range 6 {
		if w := s.do("GET", "/v1/transfers/1", bearer(freeKey), nil); (w.Code == http.StatusOK) != (i < 5) {
			t.Fatalf("request %d: %d", i, w.Code)
		}
	}
	byName := supportWho{Tenant: "acme"}
	rep, by := s.lookup(t, byName)
	if rep.Tenant != "acme" || rep.Kind != "api_key" || rep.Tier != "free" || by["tenant/"].Remaining != 0 {
		t.Fatalf("lookup after the burst: %+v", rep)
	}
	w := s.act("grant", supportAction{supportWho: byName, Policy: "Tenant", Units: 3, Reason: "ticket 4711: outage refund", By: "alice"})
	var ar actionReply
	if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &ar) != nil || ar.Result != "applied" || ar.Units != 3 || ar.TenantHash != rep.TenantHash || ar.Policy != "tenant" {
		t.Fatalf("grant: %d %s", w.Code, w.Body.String())
	}
	if _, by := s.lookup(t, byName); by["tenant/"].Remaining != 3 {
		t.Errorf("tenant remaining %d after a grant of 3, want 3", by["tenant/"].Remaining)
	}
	for i := range 4 {
		if w := s.do("GET", "/v1/transfers/1", bearer(freeKey), nil); (w.Code == http.StatusOK) != (i < 3) {
			t.Errorf("request %d after the grant: %d, want 3 admitted then 429", i, w.Code)
		}
	}
	// A per-route key by the enterprise key's credential: transfers is
	// 10 a minute per route, a POST costs 5.
	ent := supportWho{Credential: "Bearer " + enterpriseKey}
	s.do("POST", "/v1/transfers/1", bearer(enterpriseKey), nil)
	if _, by := s.lookup(t, ent); by["transfers/transfers.create"].Remaining != 5 {
		t.Fatalf("transfers on transfers.create: %+v, want 5 remaining", by["transfers/transfers.create"])
	}
	if w := s.act("reset", supportAction{supportWho: ent, Policy: "transfers", Route: "transfers.create", Reason: "ticket 4712", By: "bob"}); w.Code != http.StatusOK {
		t.Fatalf("reset of transfers: %d %s", w.Code, w.Body.String())
	}
	if _, by := s.lookup(t, ent); by["transfers/transfers.create"].Remaining != 10 || by["tenant/"].Remaining != 95 {
		t.Errorf("after the reset of transfers.create: %+v, want transfers 10 and tenant untouched at 95", by)
	}
	if w := s.act("reset", supportAction{supportWho: byName, Policy: "tenant", Reason: "ticket 4713"}); w.Code != http.StatusOK {
		t.Fatalf("reset of acme: %d %s", w.Code, w.Body.String())
	}
	if _, by := s.lookup(t, byName); by["tenant/"].Remaining != 5 || by["tenant/"].ResetMS != 0 {
		t.Errorf("after the reset: %+v, want the full 5", by["tenant/"])
	}
	s.wantActions(t, "after three actions", map[string]float64{"grant/applied": 1, "reset/applied": 2})

	recs := s.log.records(t, "console action")
	if len(recs) != 3 {
		t.Fatalf("%d console action log records, want 3:\n%s", len(recs), s.log)
	}
	want := []map[string]any{
		{"level": "WARN", "action": "grant", "tenant_hash": rep.TenantHash, "kind": "api_key", "tier": "free", "policy": "tenant",
			"reason": "ticket 4711: outage refund", "by": "alice", "units": float64(3), "admin_addr": "127.0.0.1:50000"},
		{"level": "WARN", "action": "reset", "kind": "api_key", "tier": "enterprise", "policy": "transfers", "route": "transfers.create",
			"reason": "ticket 4712", "by": "bob"},
		{"level": "WARN", "action": "reset", "tenant_hash": rep.TenantHash, "policy": "tenant", "reason": "ticket 4713", "by": ""},
	}
	for i, w := range want {
		for k, v := range w {
			if recs[i][k] != v {
				t.Errorf("log record %d: %s = %v, want %v (%v)", i, k, recs[i][k], v, recs[i])
			}
		}
	}
	if logs := s.log.String(); strings.Contains(logs, enterpriseKey) || strings.Contains(logs, freeKey) || strings.Contains(logs, `"acme"`) {
		t.Errorf("the log holds a credential or a tenant's name:\n%s", logs)
	}
}

// TestConsoleLookupIsTheQuotaEndpoints: a lookup by credential (API key,
// JWT), by name and kind, and by name alone answers what the quota
// endpoint answers the caller itself; it spends the gateway-wide read
// budget (429 past it, counted as budget) but neither the caller's own
// bound of reads nor its stage 1.
func TestConsoleLookupIsTheQuotaEndpoints(t *testing.T) {
	s := newSupportFixture(t, withQuotaReads("{rate: 1, burst: 20}"))
	s.do("GET", "/v1/transfers/1", bearer(freeKey), nil)
	s.do("POST", "/v1/transfers/1", bearer(enterpriseKey), nil)
	token := signedToken(t, jwt.MapClaims{"sub": "initech", "tier": "enterprise", "exp": s.clock.Now().Add(time.Hour).Unix()}, nil)
	s.do("GET", "/v1/transfers/1", bearer(token), nil)
	s.do("GET", "/v1/transfers/1", nil, nil) // anonymous, from 192.0.2.10
	cases := []struct {
		who        supportWho
		own        map[string]string // the caller's own request headers
		tenant     string
		kind, tier string
	}{
		{supportWho{Credential: freeKey}, bearer(freeKey), "acme", "api_key", "free"},
		{supportWho{Tenant: "acme"}, bearer(freeKey), "acme", "api_key", "free"},
		{supportWho{Tenant: "bigco", Kind: "api_key"}, bearer(enterpriseKey), "bigco", "api_key", "enterprise"},
		{supportWho{Credential: token}, bearer(token), "initech", "jwt", "enterprise"},
		{supportWho{Tenant: "initech", Tier: "Enterprise"}, bearer(token), "initech", "jwt", "enterprise"},
		{supportWho{Tenant: "192.0.2.10"}, nil, "ip:192.0.2.10", "anonymous", "anonymous"},
	}
	for _, c := range cases {
		got, _ := s.lookup(t, c.who)
		w := s.do("GET", "/_quota", c.own, nil)
		var own quotaReply
		if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &own) != nil {
			t.Fatalf("the caller's own /_quota: %d %s", w.Code, w.Body.String())
		}
		a, _ := json.Marshal(got.quotaReply)
		b, _ := json.Marshal(own)
		if got.Tenant != c.tenant || got.Kind != c.kind || got.Tier != c.tier || string(a) != string(b) || len(own.Policies) == 0 {
			t.Errorf("lookup %+v: %s %s %s\n%s\nwant %s %s %s and the caller's own\n%s", c.who, got.Tenant, got.Kind, got.Tier, a, c.tenant, c.kind, c.tier, b)
		}
	}
	// 12 reads of the budget's 20 so far. The anonymous caller's own
	// bound (10 at once) and its stage 1 (5 at once) are not spent by
	// lookups: 8 more lookups of it, then its own request and read pass.
	for range 8 {
		s.lookup(t, supportWho{Tenant: "ip:192.0.2.10"})
	}
	if w := s.do("GET", "/v1/open", nil, nil); w.Code != http.StatusOK {
		t.Errorf("the anonymous caller's request after lookups of it: %d, want 200 (its stage 1 untouched)", w.Code)
	}
	// The budget is spent now (20 reads and a burst of 20 at 1/s, the clock
	// still): a lookup is 429, counted.
	w := s.post("/console/lookup", "application/json", supportWho{Tenant: "acme"}, adminToken)
	problemBody(t, w, http.StatusTooManyRequests, codeRateLimited)
	if w.Header().Get("Retry-After") != "1" {
		t.Errorf("Retry-After %q, want 1", w.Header().Get("Retry-After"))
	}
	if got := s.refusedReads(t); got[telemetry.ReadBudget] != 1 || got[telemetry.ReadCaller] != 0 || got[telemetry.ReadTier] != 0 {
		t.Errorf("refused reads %v, want one for the budget", got)
	}
	// A lookup that names no one, or both ways, is 400.
	for _, who := range []supportWho{{}, {Credential: freeKey, Tenant: "acme"}, {Tenant: "acme", Kind: "robot"}, {Tenant: "initech"}} {
		if w := s.post("/console/lookup", "application/json", who, adminToken); w.Code != http.StatusBadRequest {
			t.Errorf("lookup %+v: %d %s, want 400", who, w.Code, w.Body.String())
		}
	}
	if w := s.post("/console/lookup", "text/plain", `{"tenant":"acme"}`, adminToken); w.Code != http.StatusBadRequest {
		t.Errorf("lookup as text/plain: %d, want 400", w.Code)
	}
}

// TestConsoleActionStoreFailure: when the store cannot settle, an action
// is 503, counted as failed and logged at Warn with the error.
func TestConsoleActionStoreFailure(t *testing.T) {
	s := newSupportFixture(t, baseConfig)
	if err := s.memory.Close(); err != nil {
		t.Fatal(err)
	}
	w := s.act("grant", supportAction{supportWho: supportWho{Tenant: "acme"}, Policy: "tenant", Units: 1, Reason: "ticket 9"})
	problemBody(t, w, http.StatusServiceUnavailable, codeLimiterUnavailable)
	s.wantActions(t, "after a failed grant", map[string]float64{"grant/failed": 1})
	if recs := s.log.records(t, "console action failed"); len(recs) != 1 || recs[0]["level"] != "WARN" || recs[0]["reason"] != "ticket 9" || recs[0]["error"] == nil {
		t.Errorf("failed action log records: %v", recs)
	}
}
