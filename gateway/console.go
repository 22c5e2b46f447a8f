package gateway

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/quotagate/quotagate/telemetry"
)

// consoleFiles are the admin console's page, script and style sheet,
// served from the binary (no CDN: the console works offline).
//
//go:embed console
var consoleFiles embed.FS

// reloadRecord is the outcome of the latest reload attempt.
type reloadRecord struct {
	ok bool
	at time.Time
}

// consoleHotKeys is how many hot keys the console state lists.
const consoleHotKeys = 10

// consoleAssets serves the console's files: GET / is the page, and
// /console/console.js and /console/console.css its script and styles. They
// carry no data; the page reads /metrics and the protected /console/state.
func consoleAssets() (page, assets http.Handler) {
	sub, err := fs.Sub(consoleFiles, "console")
	if err != nil {
		panic(err) // the embedded directory is fixed at build time
	}
	files := http.FileServerFS(sub)
	page = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:")
		http.ServeFileFS(w, r, sub, "index.html")
	})
	return page, http.StripPrefix("/console/", files)
}

// consoleState is the JSON of GET /console/state: what the console shows
// besides the metrics. Tenants appear only hashed (in the hot keys).
type consoleState struct {
	// ConfigVersion is the first 12 hex digits of the SHA-256 of the live
	// redacted configuration: it changes when a reload changes anything.
	ConfigVersion string          `json:"config_version"`
	StoreKind     string          `json:"store_kind"`
	FleetSize     int64           `json:"fleet_size"`
	Policies      []consolePolicy `json:"policies"`
	// LastReload is nil until a reload was attempted.
	LastReload *consoleReload `json:"last_reload"`
	// ConfigSince is when the live configuration was loaded (start-up or
	// the last successful reload), RFC 3339.
	ConfigSince string `json:"config_since"`
	// BreakerState is 0 closed, 1 half-open, 2 open (the worst failure
	// domain of the store's breaker; always 0 for the memory store).
	BreakerState int64 `json:"breaker_state"`
	// Breakers lists each failure domain's state by name (a Redis Cluster
	// primary's address; "" for a single Redis), in name order; empty
	// without a breaker (the memory store).
	Breakers []consoleBreaker `json:"breakers"`
	// HotKeys are the busiest store keys (hashed tenants), estimated per second.
	HotKeys any `json:"hot_keys"`
	// Regions is this instance's region and its cross-region policies;
	// absent without store.global.
	Regions *consoleRegions `json:"regions,omitempty"`
}

type consolePolicy struct {
	Name         string `json:"name"`
	Scope        string `json:"scope"`
	Algorithm    string `json:"algorithm"`
	OnStoreError string `json:"on_store_error"`
	Shadow       bool   `json:"shadow"`
}

type consoleBreaker struct {
	Domain string `json:"domain"`
	State  int64  `json:"state"`
}

type consoleReload struct {
	Result string `json:"result"` // "ok" or "error"
	At     string `json:"at"`     // RFC 3339
}

// consoleStateHandler serves GET /console/state.
func (g *Gateway) consoleStateHandler(w http.ResponseWriter, _ *http.Request) {
	p := g.live.Load()
	cfg := p.cfg
	redacted, err := json.Marshal(cfg.Redacted())
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"status": "config does not encode"})
		return
	}
	sum := sha256.Sum256(redacted)
	st := consoleState{
		ConfigVersion: hex.EncodeToString(sum[:6]),
		StoreKind:     string(cfg.Store.Kind),
		FleetSize:     p.store.FleetSize(),
		ConfigSince:   g.configSince.Load().UTC().Format(time.RFC3339),
		BreakerState:  telemetry.BreakerClosed,
		HotKeys:       g.hot.Top(consoleHotKeys),
		Regions:       p.consoleRegions(),
	}
	for name, pol := range cfg.Policies {
		st.Policies = append(st.Policies, consolePolicy{Name: name, Scope: pol.Scope.String(),
			Algorithm: pol.Algorithm.String(), OnStoreError: pol.OnStoreError.String(), Shadow: pol.Shadow})
	}
	slices.SortFunc(st.Policies, func(a, b consolePolicy) int { return strings.Compare(a.Name, b.Name) })
	if r := g.lastReload.Load(); r != nil {
		res := "error"
		if r.ok {
			res = "ok"
		}
		st.LastReload = &consoleReload{Result: res, At: r.at.UTC().Format(time.RFC3339)}
	}
	st.BreakerState = breakerGauge(p.store.Health().Breaker)
	st.Breakers = []consoleBreaker{}
	for name, state := range p.store.BreakerStates() {
		st.Breakers = append(st.Breakers, consoleBreaker{Domain: name, State: breakerGauge(state)})
	}
	slices.SortFunc(st.Breakers, func(a, b consoleBreaker) int { return strings.Compare(a.Domain, b.Domain) })
	writeJSON(w, http.StatusOK, st)
}
