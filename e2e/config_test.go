package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// The configuration types below mirror the keys of the documented config
// file (SPEC.md), not the product's Go types: a gateway is configured the way
// a user configures it. A config is written as JSON, which is valid YAML.

type gwConfig struct {
	Server    serverCfg              `json:"server"`
	Store     storeCfg               `json:"store"`
	Log       *logCfg                `json:"log,omitempty"`
	Identity  identityCfg            `json:"identity"`
	Tiers     map[string]tierCfg     `json:"tiers"`
	Policies  map[string]policyCfg   `json:"policies,omitempty"`
	Upstreams map[string]upstreamCfg `json:"upstreams"`
	Routes    []routeCfg             `json:"routes"`
	// Dimensions and Prices are the top-level dimensions and prices
	// (each entry a map[string]any as written).
	Dimensions map[string]any `json:"dimensions,omitempty"`
	Prices     map[string]any `json:"prices,omitempty"`
}

type serverCfg struct {
	Listen            string `json:"listen"`
	BodyReadTimeout   string `json:"body_read_timeout,omitempty"`
	BodyMinRate       *int64 `json:"body_min_rate,omitempty"`
	BodyBufferBytes   int64  `json:"body_buffer_bytes,omitempty"`
	AdminListen       string `json:"admin_listen"`
	ReadHeaderTimeout string `json:"read_header_timeout,omitempty"`
	MaxHeaderBytes    int    `json:"max_header_bytes,omitempty"`
	MaxBodyBytes      int64  `json:"max_body_bytes,omitempty"`
	ShutdownTimeout   string `json:"shutdown_timeout,omitempty"`
	Pprof             bool   `json:"pprof,omitempty"`
	// TrustedProxies are the peers whose X-Forwarded-For is believed.
	TrustedProxies []string `json:"trusted_proxies,omitempty"`
	// QuotaReads is server.quota_reads (rate, burst, max_items).
	QuotaReads map[string]int `json:"quota_reads,omitempty"`
}

type storeCfg struct {
	Kind      string     `json:"kind,omitempty"`
	FleetSize int        `json:"fleet_size,omitempty"`
	Fleet     *fleetCfg  `json:"fleet,omitempty"`
	Redis     *redisCfg  `json:"redis,omitempty"`
	Region    string     `json:"region,omitempty"`
	Global    *globalCfg `json:"global,omitempty"`
}

type globalCfg struct {
	Redis          redisCfg `json:"redis"`
	ReportInterval string   `json:"report_interval,omitempty"`
	LeaseTTL       string   `json:"lease_ttl,omitempty"`
}

type regionsCfg struct {
	Mode      string  `json:"mode"`
	SafeShare float64 `json:"safe_share"`
}

type fleetCfg struct {
	TTL    string `json:"ttl,omitempty"`
	Static bool   `json:"static,omitempty"`
}

type redisCfg struct {
	Addrs           []string `json:"addrs"`
	MasterName      string   `json:"master_name,omitempty"`
	Timeout         string   `json:"timeout,omitempty"`
	PoolSize        int      `json:"pool_size,omitempty"`
	KeyPrefix       string   `json:"key_prefix,omitempty"`
	BreakerFailures int      `json:"breaker_failures,omitempty"`
	BreakerCooldown string   `json:"breaker_cooldown,omitempty"`
	TLS             *tlsCfg  `json:"tls,omitempty"`
}

type tlsCfg struct {
	Enabled    bool   `json:"enabled"`
	CAFile     string `json:"ca_file,omitempty"`
	CertFile   string `json:"cert_file,omitempty"`
	KeyFile    string `json:"key_file,omitempty"`
	ServerName string `json:"server_name,omitempty"`
}

type logCfg struct {
	Level string `json:"level"`
}

type identityCfg struct {
	APIKeys   []apiKeyCfg `json:"api_keys,omitempty"`
	JWT       *jwtCfg     `json:"jwt,omitempty"`
	Anonymous *anonCfg    `json:"anonymous,omitempty"`
}

type apiKeyCfg struct {
	KeySHA256 string `json:"key_sha256"`
	Tenant    string `json:"tenant"`
	Tier      string `json:"tier"`
}

type jwtCfg struct {
	SecretEnv string `json:"secret_env"`
}

type anonCfg struct {
	Tier       string `json:"tier"`
	IPv6Prefix int    `json:"ipv6_prefix,omitempty"`
}

type tierCfg struct {
	Local *limitCfg `json:"local,omitempty"`
}

type limitCfg struct {
	Rate  int64  `json:"rate,omitempty"`
	Per   string `json:"per,omitempty"`
	Burst int64  `json:"burst,omitempty"`
	// Max is a concurrency policy's most requests in flight.
	Max int64 `json:"max,omitempty"`
	// Buckets divide a sliding window; Calendar ({unit, time_zone})
	// takes the place of per on a fixed window.
	Buckets  int            `json:"buckets,omitempty"`
	Calendar map[string]any `json:"calendar,omitempty"`
}

type policyCfg struct {
	Scope        string              `json:"scope,omitempty"`
	Algorithm    string              `json:"algorithm,omitempty"`
	OnStoreError string              `json:"on_store_error,omitempty"`
	Limits       map[string]limitCfg `json:"limits"`
	Lease        *leaseCfg           `json:"lease,omitempty"`
	SlotTTL      string              `json:"slot_ttl,omitempty"`
	Queue        *queueCfg           `json:"queue,omitempty"`
	Regions      *regionsCfg         `json:"regions,omitempty"`
	// By names the dimension the policy is keyed by; Values its limits
	// per value, then per tier.
	By     []string                       `json:"by,omitempty"`
	Values map[string]map[string]limitCfg `json:"values,omitempty"`
}

type queueCfg struct {
	Max     int    `json:"max"`
	Timeout string `json:"timeout"`
}

type leaseCfg struct {
	Auto      bool   `json:"auto,omitempty"`
	MaxBlock  int64  `json:"max_block"`
	TTL       string `json:"ttl"`
	Instances int    `json:"instances"`
}

type upstreamCfg struct {
	URL     string         `json:"url"`
	Timeout string         `json:"timeout,omitempty"`
	Breaker map[string]any `json:"breaker,omitempty"`
}

type routeCfg struct {
	Name     string `json:"name"`
	Method   string `json:"method"`
	Path     string `json:"path"`
	Upstream string `json:"upstream,omitempty"`
	// Upstreams, instead of Upstream and Policies, are the route's
	// upstreams in order, each {upstream, policies} (map[string]any).
	Upstreams []any `json:"upstreams,omitempty"`
	// Cost is a number (the units each request takes) or a cost block
	// (map[string]any with reserve, reserve_from, max, settle_from, ...).
	Cost any `json:"cost,omitempty"`
	// Policies are names, or {name, cost} mappings (map[string]any).
	Policies []any `json:"policies,omitempty"`
	// Measures are the route's measures by name (each a map[string]any
	// with the keys of a cost block).
	Measures map[string]any `json:"measures,omitempty"`
	// WebSocket lets the route's GETs upgrade to a WebSocket.
	WebSocket bool `json:"websocket,omitempty"`
	// ClientSignals is "openai" for the signals OpenAI's SDKs read.
	ClientSignals string `json:"client_signals,omitempty"`
}

// baseConfig returns a config with listeners on free ports (port 0; the
// gateway logs the ports it got), the memory store, one upstream "up" at
// upstreamURL and no identities, tiers, policies or routes.
func baseConfig(upstreamURL string) *gwConfig {
	return &gwConfig{
		Server: serverCfg{
			Listen:          "127.0.0.1:0",
			AdminListen:     "127.0.0.1:0",
			ShutdownTimeout: "3s",
		},
		Log:       &logCfg{Level: "warn"},
		Tiers:     map[string]tierCfg{},
		Policies:  map[string]policyCfg{},
		Upstreams: map[string]upstreamCfg{"up": {URL: upstreamURL, Timeout: "2s"}},
	}
}

// useRedis points the config's store at addrs with a decision deadline of
// timeout.
func (c *gwConfig) useRedis(timeout string, addrs ...string) *gwConfig {
	c.Store = storeCfg{Kind: "redis", Redis: &redisCfg{Addrs: addrs, Timeout: timeout}}
	return c
}

// addKey registers the API key (plaintext) for tenant and tier.
func (c *gwConfig) addKey(key, tenant, tier string) {
	c.Identity.APIKeys = append(c.Identity.APIKeys, apiKeyCfg{KeySHA256: sha256Hex(key), Tenant: tenant, Tier: tier})
}

// route appends a route to upstream "up".
func (c *gwConfig) route(name, method, path string, cost int64, policies ...string) {
	r := routeCfg{Name: name, Method: method, Path: path, Upstream: "up"}
	for _, p := range policies {
		r.Policies = append(r.Policies, p)
	}
	if cost != 0 {
		r.Cost = cost
	}
	c.Routes = append(c.Routes, r)
}

// bucket is a token bucket limit: rate units per per, burst at once.
func bucket(rate int64, per string, burst int64) limitCfg {
	return limitCfg{Rate: rate, Per: per, Burst: burst}
}

// write stores the config at path atomically (write, then rename), so that a
// gateway reloading at any moment reads either the old or the new file.
func (c *gwConfig) write(t testing.TB, path string) {
	t.Helper()
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		t.Fatalf("encoding config: %v", err)
	}
	writeFileAtomic(t, path, b)
}

func writeFileAtomic(t testing.TB, path string, b []byte) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), fmt.Sprintf(".%s.tmp", filepath.Base(path)))
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatalf("writing config: %v", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatalf("writing config: %v", err)
	}
}

// clone returns a deep copy of c (through its JSON form).
func (c *gwConfig) clone(t testing.TB) *gwConfig {
	t.Helper()
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	out := &gwConfig{}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
	return out
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
