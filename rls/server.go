package rls

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/internal/listenaddr"
	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/telemetry"
)

// ServerOptions are the parts of a Server that do not come from the
// configuration.
type ServerOptions struct {
	// Store decides; required. The Server does not close it.
	Store          ratelimit.Store
	Logger         *slog.Logger
	Metrics        *telemetry.Metrics
	TracerProvider trace.TracerProvider
	// Getenv reads the variable rls.client_auth.token_env names, at
	// NewServer, and is passed to config.Load on reload; nil means
	// os.LookupEnv.
	Getenv func(string) (string, bool)
}

// Server serves the decision service of a configuration's rls section:
// gRPC (RLS v3 and grpc.health.v1) and the HTTP check API.
type Server struct {
	engine *Engine
	grpc   *grpc.Server
	health *health.Server
	check  http.Handler
	// tls serves the HTTP listener (the gRPC one has its own, in the
	// server's credentials); nil means plaintext.
	tls  *tls.Config
	opts ServerOptions
	// auth is rls.client_auth; nil asks nothing of callers.
	auth *clientAuth
	// authSet says rls.client_auth was written (none: true included): a
	// listener beyond loopback may serve without auth only then.
	authSet bool
	// token says a bearer token is asked for.
	token bool

	// readTimeout bounds the read of an HTTP check request, body
	// included (checkReadTimeout unless a test changes it).
	readTimeout time.Duration
	// drainContext returns the context of a graceful stop of d;
	// context.WithTimeout unless a test replaces it.
	drainContext func(d time.Duration) (context.Context, context.CancelFunc)
	// shutdownDelay is rls.shutdown_delay: how long a stop answers
	// NOT_SERVING, still serving every call, before the graceful stop.
	shutdownDelay time.Duration
	// delay returns a channel that receives once d has passed; time.After
	// unless a test replaces it.
	delay func(d time.Duration) <-chan time.Time
	// stopping is set when a stop begins: the HTTP /healthz answers 503.
	stopping atomic.Bool

	mu    sync.Mutex // serializes reloads
	files []string   // the descriptor files in use
	// loadedFiles holds the digests of the descriptor files as NewServer
	// found them, taken before it read them: a change after its read is
	// never taken for the content it loaded.
	loadedFiles []config.Digest
}

// NewServer loads cfg.RLS.ConfigFiles and builds the service. The error
// names the file and key of a bad descriptor file.
func NewServer(cfg *config.Config, o ServerOptions) (*Server, error) {
	if o.Store == nil {
		return nil, errors.New("rls: no store")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	loadedFiles := fileDigests(cfg.RLS.ConfigFiles)
	rules, err := LoadFiles(cfg.RLS.ConfigFiles)
	if err != nil {
		return nil, err
	}
	e := NewEngine(rules, Options{
		Store: o.Store, Timeout: cfg.Store.Redis.Timeout, KeyPrefix: cfg.Store.Redis.KeyPrefix,
		OnStoreError: string(cfg.RLS.OnStoreError), RetryAfter: cfg.Store.Redis.BreakerCooldown, IgnoreOverrides: cfg.RLS.LimitOverrides == config.OverridesIgnore,
		Metrics: o.Metrics, TracerProvider: o.TracerProvider, Logger: o.Logger,
	})
	s := &Server{engine: e, health: health.NewServer(), opts: o, files: slices.Clone(cfg.RLS.ConfigFiles), loadedFiles: loadedFiles, readTimeout: checkReadTimeout,
		drainContext: func(d time.Duration) (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), d)
		},
		shutdownDelay: cfg.RLS.ShutdownDelay, delay: time.After}
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.LookupEnv
	}
	if s.auth, err = newClientAuth(cfg, getenv, o.Metrics); err != nil {
		return nil, err
	}
	s.authSet, s.token = cfg.RLS.ClientAuth != nil, s.auth != nil && s.auth.token != nil
	var gopts []grpc.ServerOption
	if t := cfg.RLS.TLS; t != nil {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("rls.tls: %w", err)
		}
		base := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		s.tls = s.auth.serverTLS(base, telemetry.RLSAPIHTTP)
		gopts = append(gopts, grpc.Creds(credentials.NewTLS(s.auth.serverTLS(base, telemetry.RLSAPIGRPC))))
	} else if s.auth != nil && s.auth.cas != nil { // validation refuses this
		return nil, errors.New("rls.client_auth.client_ca_file: requires rls.tls")
	}
	if s.token {
		// Before the stream is created: an unauthenticated call's
		// message is never read.
		gopts = append(gopts, grpc.InTapHandle(s.auth.tap))
	}
	// A fixed pool of stream workers instead of a goroutine per call: the
	// calls are small and many.
	// The codec decodes requests whose strings are not UTF-8 (see
	// requestCodec).
	gopts = append(gopts, grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0))), grpc.MaxRecvMsgSize(MaxRequestBytes),
		grpc.ForceServerCodecV2(newRequestCodec()), grpc.MaxConcurrentStreams(MaxStreams))
	s.grpc = grpc.NewServer(gopts...)
	rlsv3.RegisterRateLimitServiceServer(s.grpc, NewService(e, cfg.RLS.ResponseHeaders))
	healthpb.RegisterHealthServer(s.grpc, s.health)
	s.health.SetServingStatus(rlsv3.RateLimitService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	mux := http.NewServeMux()
	mux.Handle("/v1/check", s.auth.protect(CheckHandler(e, cfg.RLS.ResponseHeaders)))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if s.stopping.Load() {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "stopping"})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	s.check = mux
	o.Logger.Info("rls descriptor files loaded", slog.Int("domains", rules.Domains()), slog.Int("files", len(s.files)))
	return s, nil
}

// Engine returns the service's engine.
func (s *Server) Engine() *Engine { return s.engine }

// Serve serves gRPC on grpcLn and the HTTP check API on httpLn (either may
// be nil) until ctx is done. Then the health service answers NOT_SERVING
// (and /healthz 503) while both listeners keep serving every call for
// rls.shutdown_delay, so that health checkers move traffic away first;
// then both stop gracefully together within drain: calls still running
// when drain has passed are ended (their connections closed). A listener
// that fails ends the service at once, without the delay. It returns the
// first listener's error other than a normal stop.
//
// A listener bound beyond loopback is refused (an error naming
// rls.client_auth, nothing served) when rls.client_auth is left out:
// validation checks the configured host, this the address bound.
func (s *Server) Serve(ctx context.Context, grpcLn, httpLn net.Listener, drain time.Duration) error {
	if err := s.checkExposure(grpcLn, httpLn); err != nil {
		return err
	}
	errc := make(chan error, 2)
	n := 0
	var hs *http.Server
	if grpcLn != nil {
		n++
		go func() { errc <- s.grpc.Serve(grpcLn) }()
	}
	if httpLn != nil {
		n++
		// Its connection errors (a failed TLS handshake) go to the
		// service's logger, like the gateway's, not to the log package's
		// stderr, whose synchronous write would hold the connection's
		// goroutine on a stuck stderr.
		hs = &http.Server{Handler: s.check, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: s.readTimeout,
			IdleTimeout: 90 * time.Second, MaxHeaderBytes: 64 << 10,
			ErrorLog: slog.NewLogLogger(s.opts.Logger.Handler(), slog.LevelDebug)}
		if s.tls != nil {
			httpLn = tls.NewListener(httpLn, s.tls)
		}
		go func() { errc <- hs.Serve(httpLn) }()
	}
	var first error
	select {
	case <-ctx.Done():
	case first = <-errc:
		n--
	}
	// NOT_SERVING first, while the listeners still serve: a balancer
	// that health-checks us moves its traffic away during the delay,
	// rather than meeting closing connections (a GOAWAY, then refused
	// connects) and applying its failure mode to the calls in between.
	s.stopping.Store(true)
	s.health.Shutdown()
	if first == nil && s.shutdownDelay > 0 {
		s.opts.Logger.Info("rls stopping: answering NOT_SERVING before the drain", slog.Duration("shutdown_delay", s.shutdownDelay))
		select {
		case <-s.delay(s.shutdownDelay):
		case first = <-errc: // a listener failed: no use waiting
			n--
		}
	}
	// One drain for both listeners, side by side: an HTTP call that holds
	// on must not give the gRPC calls a second drain of their own after
	// it (twice server.shutdown_timeout, past a pod's grace period). Past
	// it, whatever is still open is closed.
	dctx, cancel := s.drainContext(drain)
	defer cancel()
	done := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(done) }()
	httpDone := make(chan struct{})
	go func() {
		if hs != nil && hs.Shutdown(dctx) != nil {
			_ = hs.Close()
		}
		close(httpDone)
	}()
	select {
	case <-done:
	case <-dctx.Done():
		s.grpc.Stop()
	}
	<-httpDone
	for ; n > 0; n-- {
		if err := <-errc; first == nil {
			first = err
		}
	}
	if first != nil && !errors.Is(first, http.ErrServerClosed) && !errors.Is(first, grpc.ErrServerStopped) {
		return first
	}
	return nil
}

// checkExposure refuses listeners beyond loopback without
// rls.client_auth, and warns of a token sent in clear beyond loopback.
func (s *Server) checkExposure(lns ...net.Listener) error {
	for _, ln := range lns {
		if ln == nil || listenaddr.Loopback(ln.Addr()) {
			continue
		}
		if !s.authSet {
			return fmt.Errorf("rls.client_auth: is required: a listener is bound to %s, which is not a loopback address", ln.Addr())
		}
		if s.token && s.tls == nil {
			s.opts.Logger.Warn("rls: the bearer token of rls.client_auth crosses the network in clear: set rls.tls",
				slog.String("listen", ln.Addr().String()))
		}
	}
	return nil
}

// ReloadFile reloads the main configuration at path and the descriptor
// files it names. On any error the live rules stay and the error is
// returned (and logged). Listen addresses and TLS take effect only after a
// restart.
func (s *Server) ReloadFile(path string) error {
	_, err := s.reload(path)
	return err
}

// reload is ReloadFile that also returns, on success, the digest (as
// digest makes it) of the content it loaded, each file's taken before it
// was read: the files and the list of descriptor files as they were
// loaded, not as they are after the reload.
func (s *Server) reload(path string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cfg, main, err := config.LoadDigest(path, s.opts.Getenv)
	if err == nil {
		var rules *Rules
		files := fileDigests(cfg.RLS.ConfigFiles)
		if rules, err = LoadFiles(cfg.RLS.ConfigFiles); err == nil {
			s.engine.SetRules(rules, string(cfg.RLS.OnStoreError), cfg.RLS.LimitOverrides == config.OverridesIgnore)
			s.files = slices.Clone(cfg.RLS.ConfigFiles)
			s.opts.Metrics.ConfigReload(context.Background(), true)
			s.opts.Logger.Info("rls descriptor files reloaded", slog.Int("domains", rules.Domains()))
			return combineDigests(main, files), nil
		}
	}
	s.opts.Metrics.ConfigReload(context.Background(), false)
	s.opts.Logger.Error("rls reload rejected; keeping the live descriptor files", slog.String("error", err.Error()))
	return nil, err
}

// Watch reloads whenever the main configuration at path or one of the
// descriptor files changes content, checking every interval, until ctx is
// done. loaded is the Digest of the main configuration the server was
// built from (config.LoadDigest), and the descriptor files are compared
// with their content as NewServer found it: a change made after those
// loads, even before Watch is called, is reloaded at the first check. It
// watches in a goroutine of its own.
func (s *Server) Watch(ctx context.Context, path string, interval time.Duration, loaded config.Digest) {
	last := combineDigests(loaded, s.loadedFiles)
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		s.watch(ctx, path, t.C, last)
	}()
}

// watch compares the files with last at every tick and reloads when they
// differ. The log of a difference found at the first check says "since"
// start: the files changed after they were loaded, before the first check.
func (s *Server) watch(ctx context.Context, path string, tick <-chan time.Time, last []byte) {
	since := "start"
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
			d := s.digest(path)
			if bytes.Equal(d, last) {
				since = "last check"
				continue
			}
			last = d
			s.opts.Logger.Info("rls config or descriptor file changed; reloading", slog.String("path", path), slog.String("since", since))
			since = "last check"
			// last becomes what was loaded: d was made with the list of
			// descriptor files in use before the reload, which the
			// reload may change.
			if loaded, err := s.reload(path); err == nil {
				last = loaded
			}
		}
	}
}

// digest hashes the content of the main file and of the descriptor files
// in use; a file that cannot be read hashes as the zero Digest.
func (s *Server) digest(path string) []byte {
	s.mu.Lock()
	files := s.files
	s.mu.Unlock()
	return combineDigests(fileDigests([]string{path})[0], fileDigests(files))
}

// fileDigests returns the config.FileDigest of each file, the zero Digest
// for a file that cannot be read.
func fileDigests(files []string) []config.Digest {
	ds := make([]config.Digest, len(files))
	for i, f := range files {
		ds[i], _ = config.FileDigest(f)
	}
	return ds
}

// combineDigests hashes the main file's digest and the descriptor files'
// into one.
func combineDigests(main config.Digest, files []config.Digest) []byte {
	h := sha256.New()
	h.Write(main[:])
	for _, d := range files {
		h.Write(d[:])
	}
	return h.Sum(nil)
}
