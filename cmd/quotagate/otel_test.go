package main

import (
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/quotagate/quotagate/internal/proctest"
)

// otlpReceiver is an in-test OTLP/HTTP trace endpoint that decodes what
// arrives.
type otlpReceiver struct {
	mu    sync.Mutex
	spans []*tracepb.Span
	srv   *httptest.Server
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	rc := &otlpReceiver{}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/traces" {
			w.WriteHeader(http.StatusOK) // metrics and logs are not inspected here
			return
		}
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), 400)
				return
			}
			body = zr
		}
		b, _ := io.ReadAll(body)
		var req coltrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		rc.mu.Lock()
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				rc.spans = append(rc.spans, ss.Spans...)
			}
		}
		rc.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
		_, _ = w.Write(out)
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *otlpReceiver) find(name string) *tracepb.Span {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, s := range rc.spans {
		if s.Name == name {
			for _, a := range s.Attributes {
				if a.Key == "quotagate.decision" && a.Value.GetStringValue() == "denied" {
					return s
				}
			}
		}
	}
	return nil
}

func TestBinaryExportsDeniedSpanOverOTLPHTTP(t *testing.T) {
	rc := newOTLPReceiver(t)
	upTrace := make(chan string, 4)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upTrace <- r.Header.Get("traceparent")
	}))
	defer up.Close()
	cfg := fmt.Sprintf(`server: {listen: %q, admin_listen: %q}
identity: {anonymous: {tier: anonymous}}
tiers: {anonymous: {}}
policies:
  tenant: {limits: {"*": {rate: 1, per: 1h, burst: 1}}}
upstreams: {up: {url: %q}}
routes: [{name: items.get, method: GET, path: "/items/{id}", upstream: up, policies: [tenant]}]
`, "127.0.0.1:0", "127.0.0.1:0", up.URL)
	proc := startBinary(t, cfg,
		"OTEL_EXPORTER_OTLP_ENDPOINT="+rc.srv.URL,
		"OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
		"OTEL_BSP_SCHEDULE_DELAY=50",
		"OTEL_METRIC_EXPORT_INTERVAL=60000")

	const callerTrace = "0af7651916cd43dd8448eb211c80319c"
	get := func() int {
		req, _ := http.NewRequest("GET", proc.URL()+"/items/raw-secret-7", nil)
		req.Header.Set("traceparent", "00-"+callerTrace+"-b7ad6b7169203331-01")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := get(); c != 200 {
		t.Fatalf("first request: %d", c)
	}
	if tp := <-upTrace; !strings.Contains(tp, callerTrace) {
		t.Fatalf("upstream traceparent %q lacks the caller's trace id", tp)
	}
	if c := get(); c != 429 {
		t.Fatalf("second request: %d", c)
	}
	var span *tracepb.Span
	deadline := time.Now().Add(10 * time.Second)
	for span == nil && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond) // polling the receiver
		span = rc.find("quotagate.stage.global")
	}
	if span == nil {
		proctest.FatalOverrun(t, "no denied global-stage span arrived within 10 s")
	}
	attrs := map[string]string{}
	for _, a := range span.Attributes {
		attrs[a.Key] = fmt.Sprint(a.Value.GetStringValue(), a.Value.GetIntValue())
	}
	for _, k := range []string{"quotagate.route", "quotagate.policy", "quotagate.remaining", "quotagate.retry_after_ms", "quotagate.caller"} {
		if _, ok := attrs[k]; !ok {
			t.Errorf("span lacks %s: %v", k, attrs)
		}
	}
	if fmt.Sprintf("%x", span.TraceId) != callerTrace {
		t.Errorf("span trace id %x, want the caller's", span.TraceId)
	}
	rc.mu.Lock()
	for _, s := range rc.spans {
		for _, a := range s.Attributes {
			if strings.Contains(a.Value.String(), "raw-secret-7") {
				t.Errorf("span %s attribute %s carries the raw path", s.Name, a.Key)
			}
		}
	}
	rc.mu.Unlock()
	if err := proc.Stop(); err != nil {
		t.Errorf("exit after SIGTERM: %v", err)
	}
}
