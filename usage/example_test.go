package usage_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/quotagate/quotagate/usage"
)

// A proxy's response hook installs Watch; the usage arrives when the body
// has been passed on.
func ExampleWatch() {
	resp := &http.Response{
		Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body: io.NopCloser(strings.NewReader(
			"data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}],\"usage\":null}\n\n" +
				"data: {\"choices\":[],\"usage\":{\"total_tokens\":12}}\n\n" +
				"data: [DONE]\n\n")),
	}
	src := usage.Source{Header: "X-Usage-Total-Tokens", JSON: "usage.total_tokens", SSE: "usage.total_tokens"}
	usage.Watch(resp, src, 0, func(r usage.Result) {
		fmt.Printf("units=%d found=%v from=%s complete=%v\n", r.Units, r.Found, r.From, r.Complete)
	})
	io.Copy(io.Discard, resp.Body) // the proxy copying the body to the client
	resp.Body.Close()
	// Output: units=12 found=true from=sse complete=true
}

func ExampleFromRequest() {
	body := `{"model":"m","max_tokens":500,"messages":[]}`
	r, _ := http.NewRequest("POST", "http://gateway/v1/chat/completions", strings.NewReader(body))
	r.Header.Set("X-Max-Tokens", "700")
	n, found, err := usage.FromRequest(r, usage.RequestSource{JSON: "max_tokens", Header: "X-Max-Tokens"}, 0)
	fmt.Println(n, found, err)
	forwarded, _ := io.ReadAll(r.Body) // what the upstream receives
	fmt.Println(string(forwarded) == body)

	// A body without the field states nothing, whatever the header says:
	// the upstream reads the body, not the header.
	r.Body = io.NopCloser(strings.NewReader(`{"model":"m"}`))
	n, found, err = usage.FromRequest(r, usage.RequestSource{JSON: "max_tokens", Header: "X-Max-Tokens"}, 0)
	fmt.Println(n, found, err)

	r.Header.Set("X-Max-Tokens", "lots")
	r.Body = http.NoBody
	_, _, err = usage.FromRequest(r, usage.RequestSource{JSON: "max_tokens", Header: "X-Max-Tokens"}, 0)
	fmt.Println(err)
	// Output:
	// 500 true <nil>
	// true
	// 0 false <nil>
	// usage: request header X-Max-Tokens: not a whole number of units between 0 and 2^53
}
