package gateway

import (
	"net/http"
	"testing"

	"github.com/quotagate/quotagate/proxy"
)

// TestTracingTransportPassesDirectExchanges: the tracing transport says
// whether the transport under it sends direct exchanges, so that the
// proxy's handler forwards those requests itself (through the tracing
// transport) when tracing is on, as it does without it.
func TestTracingTransportPassesDirectExchanges(t *testing.T) {
	direct, std := proxy.NewTransport(proxy.TransportOptions{}), proxy.NewTransport(proxy.TransportOptions{NoDirect: true})
	for _, c := range []struct {
		name string
		next http.RoundTripper
		want bool
	}{
		{"direct", direct, true},
		{"standard", std, false},
		{"not ours", http.DefaultTransport, false},
	} {
		var tt proxy.DirectTransport = &tracingTransport{next: c.next}
		if got := tt.DirectExchanges(); got != c.want {
			t.Errorf("%s: DirectExchanges() = %v, want %v", c.name, got, c.want)
		}
	}
}
