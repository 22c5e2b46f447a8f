package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Hidden subcommands: the bench binary re-executes itself with one of these
// to run a server in a process of its own, so that its CPU is accounted
// apart from the load generator. Each prints "listening <addr>" on stdout
// once it accepts connections, and exits on SIGTERM/SIGINT or when its
// stdin is closed (the parent went away).
const (
	cmdUpstream     = "upstream"
	cmdBareProxy    = "bare-proxy"
	cmdEvalshaProxy = "evalsha-proxy"
	listeningPrefix = "listening "
)

// upstreamBody is what the shared upstream answers to every request.
const upstreamBody = `{"ok":true}` + "\n"

// runChild runs a hidden subcommand until it is told to stop.
func runChild(name string, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	upstream := fs.String("upstream", "", "upstream base URL")
	redisAddr := fs.String("redis", "", "redis-server address")
	rate := fs.Int("rate", 0, "tokens per second per key")
	burst := fs.Int("burst", 0, "bucket size per key")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var h http.Handler
	switch name {
	case cmdUpstream:
		h = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, upstreamBody)
		})
	case cmdBareProxy, cmdEvalshaProxy:
		u, err := url.Parse(*upstream)
		if err != nil || u.Host == "" {
			return fmt.Errorf("%s: -upstream: want a URL, got %q", name, *upstream)
		}
		h = bareProxy(u)
		if name == cmdEvalshaProxy {
			if *redisAddr == "" || *rate <= 0 || *burst <= 0 {
				return fmt.Errorf("%s: -redis, -rate > 0 and -burst > 0 are required", name)
			}
			client := redis.NewClient(&redis.Options{Addr: *redisAddr, PoolSize: 64})
			defer client.Close()
			h = evalshaLimit(client, *rate, *burst, h)
		}
	default:
		return fmt.Errorf("unknown subcommand %q", name)
	}
	return serveUntilStopped(h, stdout)
}

// serveUntilStopped serves h on a free 127.0.0.1 port until a signal
// arrives or stdin reaches EOF.
func serveUntilStopped(h http.Handler, stdout io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	fmt.Fprintf(stdout, "%s%s\n", listeningPrefix, l.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

// bareProxy is httputil.ReverseProxy to u with a keep-alive pool as large
// as quotagate's (256 idle connections per host) and nothing else.
func bareProxy(u *url.URL) http.Handler {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = 1024
	tr.MaxIdleConnsPerHost = 256
	return &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(u)
			r.SetXForwarded()
		},
		Transport: tr,
	}
}

// tokenBucketLua is the kind of limiter often written by hand: one hash
// per key holding tokens and the last refill time (client clock, µs); it
// refills, takes one token if there is one, saves, sets an expiry, and
// returns 1 (allowed) or 0.
const tokenBucketLua = `
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local now = tonumber(ARGV[3])
local st = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(st[1]) or burst
local ts = tonumber(st[2]) or now
if now > ts then
  tokens = math.min(burst, tokens + (now - ts) * rate / 1000000)
end
local ok = 0
if tokens >= 1 then
  tokens = tokens - 1
  ok = 1
end
redis.call('HSET', KEYS[1], 'tokens', tokens, 'ts', now)
redis.call('PEXPIRE', KEYS[1], math.ceil(burst * 1000 / rate) + 1000)
return ok
`

// evalshaLimit runs one EVALSHA of tokenBucketLua per request, keyed by
// the API key (Authorization: Bearer, or X-API-Key), and answers 429 when
// it denies, 503 when Redis fails, or passes the request to next.
func evalshaLimit(client *redis.Client, rate, burst int, next http.Handler) http.Handler {
	script := redis.NewScript(tokenBucketLua)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok {
			key = r.Header.Get("X-API-Key")
		}
		if key == "" {
			http.Error(w, "missing API key", http.StatusUnauthorized)
			return
		}
		n, err := script.Run(r.Context(), client, []string{"rl:" + key}, rate, burst, time.Now().UnixMicro()).Int()
		if err != nil {
			http.Error(w, "rate limiter unavailable", http.StatusServiceUnavailable)
			return
		}
		if n != 1 {
			w.Header().Set("Retry-After", "1")
			http.Error(w, "rate limited", http.StatusTooManyRequests)
			return
		}
		r.Header.Del("Authorization")
		next.ServeHTTP(w, r)
	})
}
