package config

import (
	"crypto/x509"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"
)

// RLS configures the decision service: Envoy's rate limit service (RLS v3)
// over gRPC and the HTTP check API. It is off unless Listen or HTTPListen is
// set. Its limits come from ConfigFiles, written in envoyproxy/ratelimit's
// YAML format and read by package rls.
type RLS struct {
	// Listen is the gRPC host:port of
	// envoy.service.ratelimit.v3.RateLimitService; empty (the default) serves
	// no gRPC. Port 0 picks a free port. Read at start only.
	Listen string `mapstructure:"listen"`
	// HTTPListen is the host:port of POST /v1/check; empty (the default)
	// serves no HTTP check API. Read at start only.
	HTTPListen string `mapstructure:"http_listen"`
	// ConfigFiles are the descriptor files, each one domain, read at start
	// and on every reload of the main configuration. A relative path is
	// relative to the working directory. Required when the service is on.
	ConfigFiles []string `mapstructure:"config_files"`
	// OnStoreError is what a descriptor without its own on_store_error does
	// when the store cannot decide within store.redis.timeout: unavailable
	// (the default: the call fails with gRPC UNAVAILABLE or HTTP 503, so that
	// Envoy's failure_mode_deny decides), open (OK), closed (OVER_LIMIT) or
	// local (this instance's share of the limit, see store.fleet_size).
	OnStoreError RLSErrorMode `mapstructure:"on_store_error"`
	// ResponseHeaders adds the draft-10 RateLimit and RateLimit-Policy
	// headers to decisions (RLS response_headers_to_add, and the HTTP check
	// API's response). Default false. Read at start only.
	ResponseHeaders bool `mapstructure:"response_headers"`
	// LimitOverrides is what a descriptor's limit override (a limit the
	// caller sends with the descriptor) does: allow (the default, as in
	// envoyproxy/ratelimit: it replaces the configured limit, on a counter
	// of its own) or ignore (the descriptor is decided by the descriptor
	// files alone, as if no override were sent). With allow, any caller
	// can set its own limit, and keep a counter in Redis for every value
	// it sends for up to the override's window: use ignore unless every
	// caller is trusted. Reloadable.
	LimitOverrides Overrides `mapstructure:"limit_overrides"`
	// TLS, when set, serves both listeners over TLS; nil means plaintext.
	// Read at start only.
	TLS *TLS `mapstructure:"tls"`
	// ClientAuth is how callers prove they may ask for decisions: a shared
	// bearer token, client certificates, or both. Without it anyone who
	// reaches a listener can read any descriptor's remaining (dry_run) and
	// spend it, so it is required whenever a listener is bound beyond
	// loopback (a host other than a loopback address or "localhost",
	// every interface included); there, client_auth: {none: true} says
	// so on purpose. Left out on loopback listeners: every call is
	// served. Health checks (grpc.health.v1, HTTP /healthz) never need
	// it. Read at start only.
	ClientAuth *RLSClientAuth `mapstructure:"client_auth"`
	// ShutdownDelay is how long the service, told to stop (SIGINT or
	// SIGTERM), keeps serving every call while its health answers
	// NOT_SERVING (gRPC grpc.health.v1, and 503 from the HTTP listener's
	// /healthz), so that Envoy and load balancers that health-check it move
	// their traffic away before its connections start to close. The
	// graceful stop follows, bounded by server.shutdown_timeout as before:
	// a stop takes at most ShutdownDelay + server.shutdown_timeout. Default
	// DefaultRLSShutdownDelay when left out; a written 0s means no delay;
	// at most MaxRLSShutdownDelay. Read at start only.
	ShutdownDelay time.Duration `mapstructure:"shutdown_delay"`
}

// DefaultRLSShutdownDelay is rls.shutdown_delay when it is left out, and
// MaxRLSShutdownDelay the largest accepted (a longer one is a typo that
// would outlast any termination grace period).
const (
	DefaultRLSShutdownDelay = 5 * time.Second
	MaxRLSShutdownDelay     = time.Minute
)

// RLSClientAuth is rls.client_auth. TokenEnv and ClientCAFile may be set
// together: a call then needs both. None excludes them.
type RLSClientAuth struct {
	// TokenEnv names the environment variable holding the shared bearer
	// token, which must then be set and non-empty at start. A gRPC call
	// carries it as "authorization: Bearer <token>" metadata (Envoy:
	// grpc_service.initial_metadata), an HTTP check as the Authorization
	// header. Compared in constant time.
	TokenEnv string `mapstructure:"token_env"`
	// ClientCAFile is a PEM file of the certificate authorities that sign
	// callers' client certificates: with it, a TLS handshake on either
	// listener requires a client certificate those CAs verify for client
	// authentication (extended key usage clientAuth). Requires rls.tls.
	ClientCAFile string `mapstructure:"client_ca_file"`
	// None serves every call without client authentication, beyond
	// loopback too: only for a listener that a network policy opens to
	// trusted proxies alone. It must not be set with TokenEnv or
	// ClientCAFile.
	None bool `mapstructure:"none"`
}

// TLS names a certificate and its key, PEM files read at start.
type TLS struct {
	// CertFile and KeyFile are the certificate, which may carry its chain,
	// and its private key (required, both).
	CertFile string `mapstructure:"cert_file"`
	KeyFile  string `mapstructure:"key_file"`
}

// RLSOnStoreError lists the values of rls.on_store_error and of a
// descriptor's on_store_error.
var RLSOnStoreError = []string{string(RLSUnavailable), string(RLSOpen), string(RLSClosed), string(RLSLocal)}

// Enabled reports whether the decision service serves anything.
func (r *RLS) Enabled() bool { return r.Listen != "" || r.HTTPListen != "" }

func (r *RLS) setDefaults() {
	setZero(&r.OnStoreError, RLSUnavailable)
	setZero(&r.LimitOverrides, OverridesAllow)
	// Filled only on a fresh value, before decoding: a written 0s stays.
	setZero(&r.ShutdownDelay, DefaultRLSShutdownDelay)
}

func (c *Config) validateRLS(errs *Errors) {
	r := &c.RLS
	if r.Listen != "" {
		checkListen(errs, "rls.listen", r.Listen)
	}
	if r.HTTPListen != "" {
		checkListen(errs, "rls.http_listen", r.HTTPListen)
		if r.HTTPListen == r.Listen && !strings.HasSuffix(r.Listen, ":0") {
			errs.add("rls.http_listen", "must differ from rls.listen")
		}
	}
	for _, l := range []struct{ path, addr string }{{"rls.listen", r.Listen}, {"rls.http_listen", r.HTTPListen}} {
		if l.addr == "" || strings.HasSuffix(l.addr, ":0") {
			continue
		}
		if l.addr == c.Server.Listen || l.addr == c.Server.AdminListen {
			errs.add(l.path, "must differ from server.listen and server.admin_listen")
		}
	}
	if r.Enabled() && len(r.ConfigFiles) == 0 {
		errs.add("rls.config_files", "must name at least one descriptor file when rls.listen or rls.http_listen is set")
	}
	for i, f := range r.ConfigFiles {
		if strings.TrimSpace(f) == "" {
			errs.add(index("rls.config_files", i), "must not be empty")
		}
	}
	if err := r.OnStoreError.check(); err != nil {
		errs.add("rls.on_store_error", err.Error())
	}
	if err := r.LimitOverrides.check(); err != nil {
		errs.add("rls.limit_overrides", err.Error())
	}
	if r.ShutdownDelay < 0 || r.ShutdownDelay > MaxRLSShutdownDelay {
		errs.addf("rls.shutdown_delay", "must be 0s (no delay) to %v (how long NOT_SERVING is answered before the graceful stop; left out means %v), got %v",
			MaxRLSShutdownDelay, DefaultRLSShutdownDelay, r.ShutdownDelay)
	}
	if t := r.TLS; t != nil {
		if t.CertFile == "" {
			errs.add("rls.tls.cert_file", "is required when rls.tls is set")
		}
		if t.KeyFile == "" {
			errs.add("rls.tls.key_file", "is required when rls.tls is set")
		}
	}
	r.validateClientAuth(errs)
}

// validateClientAuth checks rls.client_auth, and that a listener beyond
// loopback has it.
func (r *RLS) validateClientAuth(errs *Errors) {
	const p = "rls.client_auth"
	a := r.ClientAuth
	if a == nil {
		for _, l := range []struct{ path, addr string }{{"rls.listen", r.Listen}, {"rls.http_listen", r.HTTPListen}} {
			if l.addr == "" || loopbackListen(l.addr) {
				continue
			}
			if _, err := hostPort(l.addr, true); err != nil {
				continue // the address's own problem is reported
			}
			errs.addf(p, "is required: %s %q is not a loopback address, so whoever reaches it could read any descriptor's remaining (dry_run) and spend it; "+
				"set token_env (a shared bearer token) and/or client_ca_file (client certificates, with rls.tls), "+
				"or none: true to serve it unauthenticated on purpose", l.path, l.addr)
			return
		}
		return
	}
	switch {
	case a.None && (a.TokenEnv != "" || a.ClientCAFile != ""):
		errs.add(p+".none", "must not be set with token_env or client_ca_file (none serves every call unauthenticated)")
		return
	case !a.None && a.TokenEnv == "" && a.ClientCAFile == "":
		errs.add(p, "must set token_env, client_ca_file or both (or none: true to serve every call unauthenticated)")
		return
	}
	if a.TokenEnv != "" && !envNameRE.MatchString(a.TokenEnv) {
		errs.addf(p+".token_env", "must name an environment variable, got %q", a.TokenEnv)
	}
	if f := a.ClientCAFile; f != "" {
		if r.TLS == nil {
			errs.add(p+".client_ca_file", "requires rls.tls (the service's certificate and key): client certificates are asked for in the TLS handshake")
		}
		if err := readable(f); err != nil {
			errs.addf(p+".client_ca_file", "cannot be read: %v", err)
		} else if _, err := ClientCAPool(f); err != nil {
			errs.add(p+".client_ca_file", err.Error())
		}
	}
}

// ClientCAPool reads rls.client_auth.client_ca_file: the PEM certificates
// of the CAs that sign client certificates. A file without one is an error.
func ClientCAPool(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}

// loopbackListen reports whether addr, a listen address, accepts only
// connections from this host: its host is a loopback address or
// "localhost". An empty host (every interface) is not.
func loopbackListen(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Zone() == "" && ip.Unmap().IsLoopback()
}
