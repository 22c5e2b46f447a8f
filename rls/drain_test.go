package rls

import (
	"bufio"
	"bytes"
	"context"
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

	"github.com/quotagate/quotagate/config"
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
	srv.readTimeout = 100 * time.Millisecond
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
