package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"mime"
	"net/http"
	"strings"
	"unicode"

	"github.com/quotagate/quotagate/identity"
	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/telemetry"
)

// The admin console's tenant lookup and the two actions support staff ask
// for, each a POST of JSON on the protected admin endpoints (see Admin):
//
//	POST /console/lookup  what limits a tenant, as the quota endpoint
//	                      shows it to the tenant itself
//	POST /console/grant   give a tenant's key of a policy units
//	POST /console/reset   fill a tenant's key of a policy back up
//
// Every body must be sent as Content-Type: application/json, which a
// cross-site form cannot send (and a cross-site script cannot without a
// CORS preflight that the admin listener never grants), so a page in the
// operator's browser cannot make the console act. Actions require a
// reason, are logged at Warn with it, and are counted in
// quotagate_console_actions_total.

// supportBodyLimit bounds the body of a console POST: a credential is at
// most identity.MaxCredentialBytes, a reason supportReasonLimit.
const supportBodyLimit = 16 << 10

// supportReasonLimit and supportByLimit bound an action's reason and the
// name of who takes it, in bytes.
const (
	supportReasonLimit = 500
	supportByLimit     = 100
)

// supportWho names the caller a console request is about: a credential
// (an API key, hashed and looked up in the live configuration, or a JWT,
// verified by it), or a tenant and its kind.
type supportWho struct {
	// Credential is an API key or a JWT, as a client sends it (a leading
	// "Bearer " is dropped).
	Credential string `json:"credential,omitempty"`
	// Tenant is a tenant's name (an API key's tenant, a JWT's tenant
	// claim) or an anonymous caller's address ("203.0.113.7" or
	// "ip:203.0.113.7").
	Tenant string `json:"tenant,omitempty"`
	// Kind is "api_key", "jwt" or "anonymous"; "" finds it: the tenant of
	// an API key if one has it, else an address's anonymous caller, else
	// (with JWTs configured) a JWT's tenant.
	Kind string `json:"kind,omitempty"`
	// Tier is the caller's tier: needed for a JWT's tenant, and for an API
	// key's tenant whose keys have several; "" otherwise.
	Tier string `json:"tier,omitempty"`
}

// lookupReply is the JSON of POST /console/lookup: the quota endpoint's
// reply for the caller (tenant_hash, tier, policies, truncated) with the
// tenant's name and kind, which the admin may see.
type lookupReply struct {
	Tenant string `json:"tenant"`
	Kind   string `json:"kind"`
	quotaReply
}

// supportAction is the body of POST /console/grant and /console/reset.
type supportAction struct {
	supportWho
	// Policy names the policy whose key of the caller changes.
	Policy string `json:"policy"`
	// Route is the route of the key, for a policy of scope tenant_route or
	// route (as the lookup lists it); "" for the others.
	Route string `json:"route,omitempty"`
	// Units is what a grant gives, 1 to the policy's largest settlement
	// (a key never holds more than its capacity); not sent for a reset.
	Units int64 `json:"units,omitempty"`
	// Reason says why, for the log: required.
	Reason string `json:"reason"`
	// By names who acts, for the log; optional (the admin token is shared).
	By string `json:"by,omitempty"`
}

// actionReply is the JSON of an applied action.
type actionReply struct {
	Action     string `json:"action"`
	Result     string `json:"result"`
	TenantHash string `json:"tenant_hash"`
	Kind       string `json:"kind"`
	Tier       string `json:"tier"`
	Policy     string `json:"policy"`
	Route      string `json:"route,omitempty"`
	Units      int64  `json:"units,omitempty"`
}

// badRequest is a console request refused with 400 and why.
type badRequest struct{ msg string }

func (e *badRequest) Error() string { return e.msg }

func refuse(format string, args ...any) error { return &badRequest{fmt.Sprintf(format, args...)} }

// readSupportBody decodes r's JSON body into v: Content-Type
// application/json, at most supportBodyLimit bytes, one object with no
// unknown member.
func readSupportBody(w http.ResponseWriter, r *http.Request, v any) error {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		return refuse("send the body as Content-Type: application/json")
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, supportBodyLimit))
	if err != nil {
		return refuse("the body cannot be read or exceeds %d bytes", supportBodyLimit)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return refuse("the body is not the JSON object expected: %v", err)
	}
	if dec.More() {
		return refuse("the body holds more than one JSON value")
	}
	return nil
}

// findCaller resolves who under p.
func findCaller(p *pipeline, who supportWho) (identity.Caller, error) {
	cred := strings.TrimSpace(who.Credential)
	if s, ok := strings.CutPrefix(cred, "Bearer "); ok {
		cred = strings.TrimSpace(s)
	}
	tenant := strings.TrimSpace(who.Tenant)
	tier := strings.ToLower(strings.TrimSpace(who.Tier))
	switch {
	case cred != "" && tenant != "":
		return identity.Caller{}, refuse("give a credential or a tenant, not both")
	case cred != "":
		r, err := http.NewRequest(http.MethodGet, "http://quotagate.invalid/", nil)
		if err != nil {
			return identity.Caller{}, err
		}
		r.RemoteAddr = "127.0.0.1:1"
		r.Header.Set("Authorization", "Bearer "+cred)
		c, err := p.auth.Authenticate(r)
		if err != nil {
			return identity.Caller{}, refuse("the credential is refused: %s", identity.Reason(err))
		}
		return c, nil
	case tenant == "":
		return identity.Caller{}, refuse("give a credential or a tenant")
	}
	named := func(k identity.Kind) (identity.Caller, error) { return p.auth.Named(k, tenant, tier) }
	var c identity.Caller
	var err error
	switch who.Kind {
	case "api_key":
		c, err = named(identity.KindAPIKey)
	case "jwt":
		c, err = named(identity.KindJWT)
	case "anonymous":
		c, err = named(identity.KindAnonymous)
	case "":
		c, err = named(identity.KindAPIKey)
		if errors.Is(err, identity.ErrUnknownTenant) {
			keyErr := err
			c, err = named(identity.KindAnonymous)
			if errors.Is(err, identity.ErrUnknownTenant) {
				err = keyErr
				if p.cfg.Identity.JWT != nil {
					c, err = named(identity.KindJWT)
				}
			}
		}
	default:
		return identity.Caller{}, refuse("kind %q: must be api_key, jwt, anonymous or empty", who.Kind)
	}
	if err != nil {
		return identity.Caller{}, refuse("%s", strings.TrimPrefix(err.Error(), "identity: "))
	}
	return c, nil
}

// lookupHandler serves POST /console/lookup: the caller's quotas, read
// as the quota endpoint reads them (readQuota: one read of the
// gateway-wide budget, through Stack.Read), but spending neither the
// caller's own bound of reads nor its stage 1, which are the tenant's.
func (g *Gateway) lookupHandler(w http.ResponseWriter, r *http.Request) {
	requestID := newRequestID()
	var who supportWho
	if err := readSupportBody(w, r, &who); err != nil {
		writeProblem(w, problem{Status: http.StatusBadRequest, Error: codeBadRequest, Message: err.Error(), RequestID: requestID})
		return
	}
	p := g.live.Load()
	c, err := findCaller(p, who)
	if err != nil {
		writeProblem(w, problem{Status: http.StatusBadRequest, Error: codeBadRequest, Message: err.Error(), RequestID: requestID})
		return
	}
	reply, refused := g.readQuota(r.Context(), p, c)
	if refused != nil {
		g.refuseRead(w, requestID, refused)
		return
	}
	writeJSON(w, http.StatusOK, lookupReply{Tenant: c.Tenant, Kind: c.Kind.String(), quotaReply: reply})
}

// actionHandler serves POST /console/grant (action telemetry.ConsoleGrant)
// and /console/reset (telemetry.ConsoleReset) on the key of one policy of
// the caller, with the one mechanism that gives a key units back: a
// settlement (Stack.Settle) of a fresh id, reserved at an unknown time
// (see ratelimit.Settler). A grant is a refund of Units, which fills the
// key at most to its capacity (and pays a debt first); a reset is a
// refund of ratelimit.MaxSettleDelta, which fills it (see there for the
// one debt too deep for that). It goes to the backend through the
// breaker, as a request's settlement does, and forgets the key's
// remembered denials on this instance (others' expire on their own
// within their retry times). Concurrency policies hold slots, not units:
// they are refused.
//
// Every action is counted in quotagate_console_actions_total{action,
// result}: refused (400, no store call), failed (503: the store call
// failed, after one retry of a timeout with the same id) or applied (200).
// Those that reach the store are logged at Warn with what was done, to
// whom (the tenant's hash, kind and tier), the reason, the "by" given and
// the admin client's address; never a credential.
func (g *Gateway) actionHandler(action string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		requestID := newRequestID()
		badReq := func(err error) {
			g.opts.Metrics.ConsoleAction(action, telemetry.ConsoleRefused)
			writeProblem(w, problem{Status: http.StatusBadRequest, Error: codeBadRequest, Message: err.Error(), RequestID: requestID})
		}
		var req supportAction
		if err := readSupportBody(w, r, &req); err != nil {
			badReq(err)
			return
		}
		reason, by := strings.TrimSpace(req.Reason), strings.TrimSpace(req.By)
		if err := checkNote("reason", reason, supportReasonLimit); err != nil {
			badReq(err)
			return
		}
		if reason == "" {
			badReq(refuse("give the reason for the %s: it is logged with it", action))
			return
		}
		if err := checkNote("by", by, supportByLimit); err != nil {
			badReq(err)
			return
		}
		p := g.live.Load()
		c, err := findCaller(p, req.supportWho)
		if err != nil {
			badReq(err)
			return
		}
		req.Policy, req.Route = strings.ToLower(strings.TrimSpace(req.Policy)), strings.TrimSpace(req.Route)
		item, err := p.callerKey(c, req.Policy, req.Route)
		if err != nil {
			badReq(err)
			return
		}
		most := ratelimit.MaxSettleDelta(item.Algorithm, item.Limit)
		delta := -most
		switch action {
		case telemetry.ConsoleGrant:
			if req.Units < 1 || req.Units > most {
				badReq(refuse("units: a grant gives 1 to %d units", most))
				return
			}
			delta = -req.Units
		case telemetry.ConsoleReset:
			if req.Units != 0 {
				badReq(refuse("units: a reset fills the key; it takes no units"))
				return
			}
		}
		ss := []ratelimit.Settlement{{Item: item, Delta: delta}}
		ctx := context.WithoutCancel(r.Context())
		id := newSettleID()
		err = g.settleOnce(ctx, p.store, id, ss)
		if err != nil && ratelimit.FailureKind(err) == "timeout" {
			err = g.settleOnce(ctx, p.store, id, ss) // idempotent: at most once in all
		}
		attrs := []slog.Attr{slog.String("action", action), slog.String("tenant_hash", c.ID), slog.String("kind", c.Kind.String()),
			slog.String("tier", c.Tier), slog.String("policy", req.Policy), slog.String("route", req.Route),
			slog.String("reason", reason), slog.String("by", by), slog.String("admin_addr", r.RemoteAddr),
			slog.String("request_id", requestID)}
		if action == telemetry.ConsoleGrant {
			attrs = append(attrs, slog.Int64("units", req.Units))
		}
		if err != nil {
			g.opts.Metrics.ConsoleAction(action, telemetry.ConsoleFailed)
			g.opts.Metrics.StoreError(ctx, ratelimit.FailureKind(err))
			g.opts.Logger.LogAttrs(ctx, slog.LevelWarn, "console action failed", append(attrs, slog.String("error", err.Error()))...)
			writeProblem(w, problem{Status: http.StatusServiceUnavailable, Error: codeLimiterUnavailable, RequestID: requestID,
				Message: "the limit store did not apply the " + action + "; nothing is known to have changed"})
			return
		}
		g.opts.Metrics.ConsoleAction(action, telemetry.ConsoleApplied)
		g.opts.Logger.LogAttrs(ctx, slog.LevelWarn, "console action", attrs...)
		reply := actionReply{Action: action, Result: telemetry.ConsoleApplied, TenantHash: c.ID, Kind: c.Kind.String(), Tier: c.Tier,
			Policy: req.Policy, Route: req.Route}
		if action == telemetry.ConsoleGrant {
			reply.Units = req.Units
		}
		writeJSON(w, http.StatusOK, reply)
	}
}

// checkNote refuses a reason or a name longer than limit bytes, or with
// control characters (it goes to the log as one line).
func checkNote(what, s string, limit int) error {
	if len(s) > limit {
		return refuse("%s: at most %d bytes", what, limit)
	}
	if strings.ContainsFunc(s, unicode.IsControl) {
		return refuse("%s: no control characters (one line)", what)
	}
	return nil
}

// callerKey returns the item of the store key of policy that limits
// caller c on route (for a policy kept per route; "" for one kept per
// tenant or globally), as the quota endpoint lists it (see quotaItems),
// or why there is none.
func (p *pipeline) callerKey(c identity.Caller, policy, route string) (ratelimit.Item, error) {
	if policy == "" {
		return ratelimit.Item{}, refuse("name the policy")
	}
	items, out, binds, _ := p.quotaItems(c.Subject, c.Tier, math.MaxInt)
	var keys []string
	for i := range items {
		if out[i].Name != policy {
			continue
		}
		if binds[i].algorithm == ratelimit.Concurrency {
			return ratelimit.Item{}, refuse("policy %q holds concurrency slots, not units: a slot frees itself when its request ends or after slot_ttl", policy)
		}
		if out[i].Route == route {
			return items[i], nil
		}
		keys = append(keys, out[i].Route)
	}
	switch {
	case len(keys) == 0:
		return ratelimit.Item{}, refuse("policy %q does not limit this caller (tier %q) on any route", policy, c.Tier)
	case keys[0] == "":
		return ratelimit.Item{}, refuse("policy %q keeps one key per tenant or one for all, not per route: send no route", policy)
	case route == "":
		return ratelimit.Item{}, refuse("policy %q keeps a key per route: name the route, one of %s", policy, strings.Join(keys, ", "))
	}
	return ratelimit.Item{}, refuse("policy %q has no key of this caller on route %q (its routes: %s)", policy, route, strings.Join(keys, ", "))
}
