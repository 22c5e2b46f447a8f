package main

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/proctest"
	"github.com/quotagate/quotagate/internal/redistest"
)

// TestBinarySIGHUPDuringStart: a SIGHUP that arrives while the gateway is
// still starting (here while it waits up to a second for a Redis that
// accepts connections and never answers PING) neither kills the process,
// as the signal's default action would, nor is lost: the gateway starts,
// and then reloads the file, which changed before the signal.
func TestBinarySIGHUPDuringStart(t *testing.T) {
	silent := redistest.StartHostile(t, nil, "PING")
	const cfg = `server: {listen: "127.0.0.1:0", admin_listen: "127.0.0.1:0"}
log: {level: info}
store: {kind: redis, redis: {addrs: ["%s"], timeout: 250ms}}
identity: {anonymous: {tier: anonymous}}
tiers: {anonymous: {}}
upstreams: {echo: {url: "echo:"}}
routes: [{name: echo, method: GET, path: /, upstream: echo}]
`
	path := configFile(t, strings.Replace(cfg, "%s", silent.Addr, 1))
	p := proctest.Start(t, proctest.Binary(t), proctest.Options{
		Args: []string{"-config", path, "-watch-interval", "0"}, Env: proctest.Environ(), NoListen: true,
	})
	// The store check's PING is the start's last step before it
	// listens, and waits a second for the silent Redis: the config has
	// been read by then; the file changes, and the signal comes, while
	// it waits.
	for wait := time.Now(); silent.Answered.Load() == 0; {
		if p.Exited() {
			t.Fatalf("the gateway exited before it sent PING: %v\n%s", p.ExitErr(), p.Logs.Tail(20))
		}
		if time.Since(wait) > proctest.StartTimeout {
			proctest.FatalOverrun(t, "the gateway sent no PING within %v", proctest.StartTimeout)
		}
		time.Sleep(5 * time.Millisecond) // polling another process
	}
	if err := os.WriteFile(path, []byte(strings.Replace(strings.Replace(cfg, "%s", silent.Addr, 1), "path: /,", "path: /x,", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	p.Signal(syscall.SIGHUP)
	if _, ok := p.Logs.WaitLine(proctest.StartedMsg, proctest.StartTimeout); !ok {
		if p.Exited() {
			t.Fatalf("a SIGHUP during the start ended the gateway: %v\n%s", p.ExitErr(), p.Logs.Tail(20))
		}
		proctest.FatalOverrun(t, "the gateway did not start within %v after a SIGHUP during its start", proctest.StartTimeout)
	}
	if _, ok := p.Logs.WaitLine("config reloaded", proctest.StartTimeout); !ok {
		t.Errorf("the SIGHUP received during the start was not acted on once started:\n%s", p.Logs.Tail(20))
	}
}
