package usage

import (
	"net/http"
	"strings"
	"testing"
)

var sseHeader = http.Header{"Content-Type": {"text/event-stream; charset=utf-8"}}

func TestWatchSSE(t *testing.T) {
	const path = "usage.total_tokens"
	for _, tc := range []bodyCase{
		{"openai style",
			"data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}],\"usage\":null}\n\n" +
				"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"total_tokens\":12}}\n\n" +
				"data: [DONE]\n\n", 12, true},
		{"last event wins", "data: {\"usage\":{\"total_tokens\":5}}\n\ndata: {\"usage\":{\"total_tokens\":9}}\n\n", 9, true},
		{"absent does not overwrite", "data: {\"usage\":{\"total_tokens\":5}}\n\ndata: {\"x\":1}\n\n", 5, true},
		{"null does not overwrite", "data: {\"usage\":{\"total_tokens\":5}}\n\ndata: {\"usage\":{\"total_tokens\":null}}\n\n", 5, true},
		{"invalid does not overwrite", "data: {\"usage\":{\"total_tokens\":5}}\n\ndata: {\"usage\":{\"total_tokens\":-1}}\n\n", 5, true},
		{"zero overwrites", "data: {\"usage\":{\"total_tokens\":5}}\n\ndata: {\"usage\":{\"total_tokens\":0}}\n\n", 0, true},
		{"CRLF", "data: {\"usage\":{\"total_tokens\":5}}\r\n\r\n", 5, true},
		{"CR", "data: {\"usage\":{\"total_tokens\":5}}\r\r", 5, true},
		{"no space after colon", "data:{\"usage\":{\"total_tokens\":5}}\n\n", 5, true},
		{"two spaces after colon", "data:  {\"usage\":{\"total_tokens\":5}}\n\n", 5, true},
		{"multi-line data", "data: {\"usage\":\ndata: {\"total_tokens\":5}}\n\n", 5, true},
		{"bare data line joins", "data: {\"usage\":\ndata\ndata: {\"total_tokens\":5}}\n\n", 5, true},
		{"other fields and comments", ": keep-alive\nevent: done\nid: 7\nretry: 10\ndata: {\"usage\":{\"total_tokens\":5}}\n\n", 5, true},
		{"field name not data", "datax: {\"usage\":{\"total_tokens\":5}}\n\n", 0, false},
		{"Data is another field", "Data: {\"usage\":{\"total_tokens\":5}}\n\n", 0, false},
		{"event not ended", "data: {\"usage\":{\"total_tokens\":5}}\n", 0, false},
		{"event not ended after one", "data: {\"usage\":{\"total_tokens\":5}}\n\ndata: {\"usage\":{\"total_tokens\":6}}", 5, true},
		{"BOM", bom + "data: {\"usage\":{\"total_tokens\":5}}\n\n", 5, true},
		{"BOM only at the start", "\n" + bom + "data: {\"usage\":{\"total_tokens\":5}}\n\n", 0, false},
		{"events of two lines each", "event: a\ndata: {\"usage\":{\"total_tokens\":1}}\n\nevent: b\ndata: {\"usage\":{\"total_tokens\":2}}\n\n", 2, true},
		{"broken json event", "data: {\"usage\":{\"total_tokens\":5}\n\n", 0, false},
		{"blank lines only", "\n\n\n", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := Result{Units: tc.units, Found: tc.found, Complete: true}
			if tc.found {
				want.From = "sse"
			}
			watchSplits(t, sseHeader, tc.body, Source{JSON: "ignored", SSE: path}, want)
		})
	}
}

func TestWatchSSEEventCap(t *testing.T) {
	small := "data: {\"n\":1}\n\n"
	big := "data: {\"pad\":\"" + strings.Repeat("x", 100) + "\",\"n\":2}\n\n"
	r := watchAll(t, sseHeader, []string{small, big}, Source{SSE: "n"}, 50)
	if r != (Result{1, true, "sse", true, false}) {
		t.Errorf("an event over the cap changed the usage: %+v", r)
	}
	// the cap is per event: many small events add up to more than it
	var many strings.Builder
	for i := range 100 {
		many.WriteString("data: {\"n\":" + string(rune('0'+i%10)) + "}\n\n")
	}
	r = watchAll(t, sseHeader, []string{many.String()}, Source{SSE: "n"}, 50)
	if r != (Result{9, true, "sse", true, false}) {
		t.Errorf("small events past the cap in total: %+v, want 9", r)
	}
}

func TestWatchSSEvsJSON(t *testing.T) {
	// A JSON body is not read as events, nor events as JSON.
	if r := watchAll(t, jsonHeader, []string{"data: {\"n\":1}\n\n"}, Source{SSE: "n"}, 0); r.Found {
		t.Errorf("events in a JSON response: %+v", r)
	}
	if r := watchAll(t, sseHeader, []string{`{"n":1}`}, Source{JSON: "n"}, 0); r.Found {
		t.Errorf("JSON in an event stream: %+v", r)
	}
	// Any other Content-Type, or none, is parsed as JSON.
	for _, ct := range []string{"", "text/plain", "application/vnd.api+json"} {
		h := http.Header{}
		if ct != "" {
			h.Set("Content-Type", ct)
		}
		if r := watchAll(t, h, []string{`{"n":1}`}, Source{JSON: "n"}, 0); !r.Found {
			t.Errorf("Content-Type %q: %+v, want found", ct, r)
		}
	}
	if r := watchAll(t, http.Header{"Content-Type": {"Text/Event-Stream"}}, []string{"data: {\"n\":1}\n\n"}, Source{SSE: "n"}, 0); !r.Found {
		t.Errorf("media type in another case: %+v", r)
	}
}
