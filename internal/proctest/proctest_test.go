package proctest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLearnAddrsReadsTheStartedLine(t *testing.T) {
	p := &Proc{Logs: NewLogs(), done: make(chan struct{})}
	errc := make(chan error, 1)
	go func() { errc <- p.learnAddrs("", time.Minute) }()
	// A line that only mentions the message, then the real one in parts.
	_, _ = p.Logs.Write([]byte(`{"msg":"config","note":"quotagate started soon"}` + "\n"))
	_, _ = p.Logs.Write([]byte(`{"time":"t","level":"INFO","msg":"quotagate started","listen":"127.0.0.1:40001",`))
	_, _ = p.Logs.Write([]byte(`"admin_listen":"127.0.0.1:40002"}` + "\n"))
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if p.Listen != "127.0.0.1:40001" || p.AdminListen != "127.0.0.1:40002" {
		t.Fatalf("learned %q %q", p.Listen, p.AdminListen)
	}
	if p.URL() != "http://127.0.0.1:40001" || p.AdminURL() != "http://127.0.0.1:40002" {
		t.Fatalf("URLs %q %q", p.URL(), p.AdminURL())
	}
}

func TestLearnAddrsReadsTheAddrFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "addrs.json")
	p := &Proc{Logs: NewLogs(), done: make(chan struct{})}
	errc := make(chan error, 1)
	go func() { errc <- p.learnAddrs(path, time.Minute) }()
	// As the gateway writes it: whole, by a rename.
	if err := os.WriteFile(path+".tmp", []byte(`{"listen":"127.0.0.1:40003","admin_listen":"127.0.0.1:40004"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if p.Listen != "127.0.0.1:40003" || p.AdminListen != "127.0.0.1:40004" {
		t.Fatalf("learned %q %q", p.Listen, p.AdminListen)
	}
}

func TestLearnAddrsStopsAtExitAndDeadline(t *testing.T) {
	p := &Proc{Logs: NewLogs(), done: make(chan struct{})}
	close(p.done)
	if err := p.learnAddrs("", time.Minute); err == nil || p.Listen != "" {
		t.Fatalf("after exit: %v, listen %q", err, p.Listen)
	}
	p = &Proc{Logs: NewLogs(), done: make(chan struct{})}
	if err := p.learnAddrs("", time.Millisecond); err == nil || !strings.Contains(err.Error(), "within") {
		t.Fatalf("at the deadline: %v", err)
	}
	p = &Proc{Logs: NewLogs(), done: make(chan struct{})}
	_, _ = p.Logs.Write([]byte(`{"msg":"quotagate started","listen":"127.0.0.1:1"}` + "\n"))
	if err := p.learnAddrs("", time.Minute); err == nil || !strings.Contains(err.Error(), "lacks") {
		t.Fatalf("line without admin_listen: %v", err)
	}
}

// recorder is a testing.TB that keeps what Error and Fatal were given.
type recorder struct {
	testing.TB
	msgs  []string
	fatal bool
}

func (r *recorder) Helper()           {}
func (r *recorder) Error(args ...any) { r.msgs = append(r.msgs, args[0].(string)) }
func (r *recorder) Fatal(args ...any) { r.msgs = append(r.msgs, args[0].(string)); r.fatal = true }

func TestOverrunIsItsOwnClassOfFailure(t *testing.T) {
	r := &recorder{TB: t}
	Overrun(r, "readiness took %v", 3*time.Second)
	FatalOverrun(r, "stop")
	if len(r.msgs) != 2 || !r.fatal {
		t.Fatalf("recorded %q (fatal %v)", r.msgs, r.fatal)
	}
	for _, m := range r.msgs {
		if !strings.HasPrefix(m, OverrunPrefix) || !strings.Contains(m, "load average") {
			t.Errorf("overrun message %q: want the %q prefix and the load average", m, OverrunPrefix)
		}
	}
	if !strings.Contains(r.msgs[0], "readiness took 3s") {
		t.Errorf("message lost its text: %q", r.msgs[0])
	}
}

func TestLogsDigestLeavesOutAccessLines(t *testing.T) {
	l := NewLogs()
	_, _ = l.Write([]byte("{\"msg\":\"request\"}\n{\"msg\":\"a\"}\n{\"msg\":\"request\"}\n{\"msg\":\"b\"}\n"))
	if got := l.Digest(1); got != "[... 1 earlier lines]\n{\"msg\":\"b\"}\n[2 access-log lines left out]" {
		t.Errorf("Digest(1) = %q", got)
	}
	if l.Count(`"request"`) != 2 || !strings.HasSuffix(l.Tail(1), `{"msg":"b"}`) {
		t.Errorf("Count/Tail: %d %q", l.Count(`"request"`), l.Tail(1))
	}
}

func TestLogsWaitLine(t *testing.T) {
	l := NewLogs()
	got := make(chan string, 1)
	go func() {
		line, _ := l.WaitLine("ready", time.Minute)
		got <- line
	}()
	_, _ = l.Write([]byte("starting\n"))
	_, _ = l.Write([]byte("now ready\n"))
	if line := <-got; line != "now ready" {
		t.Fatalf("WaitLine = %q", line)
	}
	if _, ok := l.WaitLine("never", time.Millisecond); ok {
		t.Fatal("WaitLine found a line that was never written")
	}
}
