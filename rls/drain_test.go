package rls

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/internal/proctest"
	"github.com/quotagate/quotagate/ratelimit"
)

// heldStore holds every decision until its caller's context ends, and
// says on entered that it holds one.
type heldStore struct{ entered chan struct{} }

func (s heldStore) Decide(ctx context.Context, _ []ratelimit.Item) (ratelimit.Decision, error) {
	s.entered <- struct{}{}
	<-ctx.Done()
	return ratelimit.Decision{}, ctx.Err()
}
func (heldStore) Close() error { return nil }

// await receives from ch, failing the test when nothing comes for a
// minute (a hang, not a slow machine).
func await[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(time.Minute):
		t.Fatalf("no %s after a minute", what)
		panic("unreachable")
	}
}

// TestDrainIsOneBudget: with a gRPC call and an HTTP call that both hold
// on, a stop takes one drain, not one for each listener after the other:
// when the drain has passed, Serve ends both calls and returns. Before,
// the HTTP listener's drain ran first and the gRPC calls then got a
// second, so a stop could take twice server.shutdown_timeout, beyond a
// pod's grace period.
func TestDrainIsOneBudget(t *testing.T) {
	cfg := config.Default()
	cfg.Store.Redis.Timeout = time.Hour
	cfg.RLS.ConfigFiles = []string{"testdata/edge.yaml"}
	cfg.RLS.ShutdownDelay = 0 // the drain alone is measured here
	store := heldStore{entered: make(chan struct{}, 2)}
	srv, err := NewServer(cfg, ServerOptions{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	drains := make(chan context.CancelFunc, 2)
	srv.drainContext = func(time.Duration) (context.Context, context.CancelFunc) {
		ctx, cancel := context.WithCancel(context.Background())
		drains <- cancel // the test says when the drain has passed
		return ctx, cancel
	}
	gl, hl := listeners(t)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, gl, hl, time.Hour) }()

	conn, err := grpc.NewClient(gl.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	go func() {
		_, _ = rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{
			Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{pbDesc("remote_address", "192.0.2.110")}})
	}()
	go func() {
		resp, err := http.Post("http://"+hl.Addr().String()+"/v1/check", "application/json",
			strings.NewReader(`{"domain": "edge", "descriptors": [[{"key": "remote_address", "value": "192.0.2.111"}]]}`))
		if err == nil {
			resp.Body.Close()
		}
	}()
	await(t, store.entered, "gRPC or HTTP call in the store")
	await(t, store.entered, "second call in the store")

	stop()
	passed := await(t, drains, "drain")
	passed()
	if err := await(t, served, "return from Serve after its drain had passed"); err != nil {
		t.Errorf("Serve: %v", err)
	}
	if len(drains) > 0 {
		t.Error("Serve started a second drain")
	}
}

// TestStalledCheckBodyIsCut: a /v1/check client that sends part of its
// body and stops is answered 408 once the read timeout passes, and its
// connection does not stay open for as long as it likes (holding a
// goroutine, and a stop's drain).
func TestStalledCheckBodyIsCut(t *testing.T) {
	srv := newMemoryServer(t)
	// The bound runs from the accept, headers included: long enough for
	// the headers, written at once, to be read on a busy machine.
	srv.readTimeout = time.Second
	gl, hl := listeners(t)
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, gl, hl, 5*time.Second) }()
	t.Cleanup(func() { stop(); <-served })

	c, err := net.Dial("tcp", hl.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "POST /v1/check HTTP/1.1\r\nHost: rls\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"domain\": "); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(time.Minute)) // a hang, not a slow machine
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		// net/http closes without a word when the headers themselves
		// were not read within the bound: the machine was too slow for
		// the test, not the body's timeout wrong.
		proctest.FatalOverrun(t, "the connection closed without an answer: its headers were not read within %v", srv.readTimeout)
	}
	if err != nil {
		t.Fatalf("a stalled body: %v, want a 408", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Errorf("a stalled body: %d, want 408", resp.StatusCode)
	}
}

// TestStreamsPerConnectionBounded: a client that opens streams and never
// sends their messages (ignoring the server's SETTINGS, as an attacker
// would) has the stream beyond MaxStreams refused. Before, gRPC's default
// (2^32-1) let one connection open streams without end, each holding a
// goroutine that waits for its message.
func TestStreamsPerConnectionBounded(t *testing.T) {
	_, conn, _ := startServer(t, false)
	c, err := net.Dial("tcp", conn.Target())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Minute)) // a hang, not a slow machine
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", "rls"},
		{":path", "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	last := uint32(2*MaxStreams + 1) // stream ids are odd: this is the (MaxStreams+1)th
	for id := uint32(1); id <= last; id += 2 {
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("no stream refused after %d open: %v", MaxStreams+1, err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.RSTStreamFrame:
			if f.StreamID != last || f.ErrCode != http2.ErrCodeRefusedStream {
				t.Fatalf("stream %d reset with %v; want only stream %d refused", f.StreamID, f.ErrCode, last)
			}
			return
		}
	}
}

// TestStopAnswersNotServingBeforeTheDrain: a stop first turns the health
// to NOT_SERVING (gRPC, and /healthz 503) and then, for
// rls.shutdown_delay, keeps both listeners answering calls before the
// graceful stop begins, so that a balancer health-checking the service
// moves its traffic away before connections close. Before, NOT_SERVING
// and the graceful stop began at the same moment, leaving a balancer no
// window: its calls met closing connections instead.
func TestStopAnswersNotServingBeforeTheDrain(t *testing.T) {
	srv := newMemoryServer(t)
	srv.shutdownDelay = 7 * time.Second
	delays := make(chan time.Duration, 1)
	passed := make(chan time.Time)
	srv.delay = func(d time.Duration) <-chan time.Time {
		delays <- d
		return passed // the test says when the delay has passed
	}
	drains := make(chan struct{}, 1)
	srv.drainContext = func(d time.Duration) (context.Context, context.CancelFunc) {
		drains <- struct{}{}
		return context.WithTimeout(context.Background(), d)
	}
	gl, hl := listeners(t)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, gl, hl, time.Minute) }()
	conn, err := grpc.NewClient(gl.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	health := healthpb.NewHealthClient(conn)
	const service = "envoy.service.ratelimit.v3.RateLimitService"
	if h, err := health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: service}); err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health before the stop: %v, %v; want SERVING", h, err)
	}

	stop()
	select {
	case d := <-delays:
		if d != 7*time.Second {
			t.Errorf("delay of %v, want rls.shutdown_delay (7s)", d)
		}
	case err := <-served:
		t.Fatalf("Serve returned (%v) without a delay before the drain", err)
	case <-time.After(time.Minute):
		t.Fatal("no delay and no return a minute after the stop (a hang, not a slow machine)")
	}
	if len(drains) > 0 {
		t.Error("the graceful stop began before the delay had passed")
	}
	if h, err := health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: service}); err != nil || h.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("health during the delay: %v, %v; want NOT_SERVING", h, err)
	}
	resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{
		Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{pbDesc("remote_address", "192.0.2.120")}})
	if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Errorf("a call during the delay: %v, %v; want it decided (OK)", resp, err)
	}
	base := "http://" + hl.Addr().String()
	if code := httpStatus(t, http.MethodGet, base+"/healthz", ""); code != http.StatusServiceUnavailable {
		t.Errorf("GET /healthz during the delay: %d, want 503", code)
	}
	if code := httpStatus(t, http.MethodPost, base+"/v1/check", `{"domain": "edge", "descriptors": [[{"key": "remote_address", "value": "192.0.2.121"}]]}`); code != http.StatusOK {
		t.Errorf("POST /v1/check during the delay: %d, want 200", code)
	}

	close(passed)
	if err := await(t, served, "return from Serve after the delay"); err != nil {
		t.Errorf("Serve: %v", err)
	}
	if len(drains) != 1 {
		t.Error("no graceful stop after the delay")
	}
}

// httpStatus sends a request and returns its status, failing the test
// when there is no answer.
func httpStatus(t *testing.T, method, url, body string) int {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
