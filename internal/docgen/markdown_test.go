package main

import "testing"

func TestMarkdown(t *testing.T) {
	w, err := walk(configDir)
	if err != nil {
		t.Fatal(err)
	}
	server, store, route := w.cfg.named("Server"), w.cfg.named("Store"), w.cfg.named("Route")
	for _, tc := range []struct {
		ctx       *typ
		doc, want string
	}{
		{server, "Listen is the host:port.", "`listen` is the host:port."},
		{server, "BodyMinRate × (elapsed − BodyReadTimeout) and n/BodyMinRate",
			"`body_min_rate` × (elapsed − `body_read_timeout`) and n/`body_min_rate`"},
		{store, "registered live in Redis (see Fleet); with Fleet.Static, it is FleetSize",
			"registered live in Redis (see Fleet); with `fleet.static`, it is `fleet_size`"},
		{route, "WebSocket lets a GET upgrade to a WebSocket.", "`websocket` lets a GET upgrade to a WebSocket."},
		{nil, "QUOTAGATE_STORE_KIND=redis sets store.kind; tenant_route, e.g. this.",
			"`QUOTAGATE_STORE_KIND=redis` sets `store.kind`; `tenant_route`, e.g. this."},
		{nil, `at most MaxHeapFloorBytes; a "*" key; /debug/pprof/ and [a-z0-9_.-]`,
			"at most `MaxHeapFloorBytes` (64 GiB); a `\"*\"` key; `/debug/pprof/` and `[a-z0-9_.-]`"},
		{nil, "x >= 1, <token> and a_b*c", `x >= 1, \<token> and ` + "`a_b`" + `\*c`},
	} {
		if got := w.markdown(tc.doc, tc.ctx); got != tc.want {
			t.Errorf("markdown(%q)\n got %s\nwant %s", tc.doc, got, tc.want)
		}
	}
}
