package proctest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// StartTimeout bounds how long a started process may take to log the
// addresses it listens on, and how long WaitReady waits for /readyz by
// default.
const StartTimeout = 20 * time.Second

// StopTimeout is how long Stop waits for the process to exit after SIGTERM
// when Options.StopTimeout is zero: the gateway's default shutdown_timeout
// (10 s) and a margin.
const StopTimeout = 20 * time.Second

// StartedMsg is the message of the log line the gateway writes at level
// info once both listeners are bound; its "listen" and "admin_listen" fields
// are the bound addresses.
const StartedMsg = "quotagate started"

// Options configures a process started by Start.
type Options struct {
	// Name labels the process in messages; "" is "quotagate".
	Name string
	// Args are the command-line arguments after the binary's path.
	Args []string
	// Env is the process's whole environment; nil is Environ().
	Env []string
	// Dir is the working directory; "" is the test's.
	Dir string
	// StartTimeout bounds the wait for StartedMsg; 0 is StartTimeout.
	StartTimeout time.Duration
	// StopTimeout is how long Stop waits after SIGTERM before it kills the
	// process and reports the overrun; 0 is StopTimeout.
	StopTimeout time.Duration
	// NoListen is for a process that is not expected to bind its listeners
	// (a run that should fail, a subcommand): Start returns once it is
	// running, and adds no argument.
	NoListen bool
	// FromLog is for a command that runs the gateway without passing it
	// Start's arguments (a shell line): the addresses are read from the
	// StartedMsg log line, which needs log level info or lower. Otherwise
	// Start adds "-addr-file PATH" to Args and reads them from that file
	// (or from the log line, whichever comes first).
	FromLog bool
	// Stderr, when not nil, is the process's stderr instead of Logs (which
	// then gets stdout only), handed to it as is: the write end of a pipe
	// the test never reads stands for a log reader that hung. Needs
	// NoListen or the default -addr-file (not FromLog).
	Stderr *os.File
	// Stdout is Stderr for stdout (a console exporter's reader that hung).
	Stdout *os.File
}

// Proc is one running process of the binary. Its fields are set by Start and
// not changed afterwards.
type Proc struct {
	Name string
	Cmd  *exec.Cmd
	// Listen and AdminListen are the bound host:port of the public and admin
	// listeners, as the process logged them (empty with Options.NoListen).
	Listen, AdminListen string
	// Logs is everything the process wrote to stdout and stderr.
	Logs *Logs

	tb          testing.TB
	stopTimeout time.Duration
	done        chan struct{} // closed when the process has exited
	exit        error         // the process's exit status; set before done closes
	stopOnce    sync.Once
	stopErr     error
}

// Environ is the test's environment without QUOTAGATE_* and OTEL_*
// variables (which would override the config under test), with extra added.
func Environ(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "QUOTAGATE_") && !strings.HasPrefix(kv, "OTEL_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// Start runs bin with opts and, unless opts.NoListen, waits until the
// process logs StartedMsg (bounded by StartTimeout), learning the bound
// addresses from that line. The process is stopped with Stop when tb ends,
// and its log is printed when tb failed. A process that exits before it
// listens fails tb (with its log); one that is still silent at the deadline
// fails tb as an overrun.
func Start(tb testing.TB, bin string, opts Options) *Proc {
	tb.Helper()
	p := &Proc{Name: opts.Name, Logs: NewLogs(), tb: tb, stopTimeout: opts.StopTimeout, done: make(chan struct{})}
	if p.Name == "" {
		p.Name = "quotagate"
	}
	if p.stopTimeout <= 0 {
		p.stopTimeout = StopTimeout
	}
	args := opts.Args
	addrFile := ""
	if !opts.NoListen && !opts.FromLog {
		addrFile = filepath.Join(tb.TempDir(), "addrs.json")
		args = append(slices.Clone(args), "-addr-file", addrFile)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env, cmd.Dir = opts.Env, opts.Dir
	if cmd.Env == nil {
		cmd.Env = Environ()
	}
	cmd.Stdout, cmd.Stderr = p.Logs, p.Logs
	if opts.Stderr != nil {
		cmd.Stderr = opts.Stderr
	}
	if opts.Stdout != nil {
		cmd.Stdout = opts.Stdout
	}
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		tb.Fatalf("%s: starting %s: %v", p.Name, bin, err)
	}
	p.Cmd = cmd
	go func() {
		p.exit = cmd.Wait()
		close(p.done)
	}()
	tb.Cleanup(func() {
		if err := p.Stop(); errors.Is(err, errStopOverrun) {
			Overrun(tb, "%s: %v", p.Name, err)
		}
		if tb.Failed() {
			tb.Logf("---- log of %s (exit: %v), access lines left out ----\n%s", p.Name, p.exit, p.Logs.Digest(80))
		}
	})
	if opts.NoListen {
		return p
	}
	timeout := opts.StartTimeout
	if timeout <= 0 {
		timeout = StartTimeout
	}
	if err := p.learnAddrs(addrFile, timeout); err != nil {
		if p.Exited() {
			tb.Fatalf("%s exited (%v) before it listened; log:\n%s", p.Name, p.exit, p.Logs.Tail(60))
		}
		FatalOverrun(tb, "%s: %v; log:\n%s", p.Name, err, p.Logs.Tail(60))
	}
	return p
}

// learnAddrs waits until the addresses are in addrFile (when it is not
// "") or in a StartedMsg log line, and sets them.
func (p *Proc) learnAddrs(addrFile string, timeout time.Duration) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	var tick <-chan time.Time
	if addrFile != "" {
		t := time.NewTicker(10 * time.Millisecond) // polling another process's file
		defer t.Stop()
		tick = t.C
	}
	for {
		changed := p.Logs.Changed()
		if addrFile != "" {
			if b, err := os.ReadFile(addrFile); err == nil {
				return p.setAddrs(b, addrFile)
			}
		}
		for _, line := range strings.Split(p.Logs.String(), "\n") {
			var rec struct {
				Msg string `json:"msg"`
			}
			if strings.Contains(line, StartedMsg) && json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == StartedMsg {
				return p.setAddrs([]byte(line), "the log line")
			}
		}
		select {
		case <-changed:
		case <-tick:
		case <-p.done:
			return errors.New("exited")
		case <-deadline.C:
			return fmt.Errorf("no bound addresses (in the %q log line or the -addr-file) within %v", StartedMsg, timeout)
		}
	}
}

// setAddrs sets the addresses from the JSON object b, read from src.
func (p *Proc) setAddrs(b []byte, src string) error {
	var a struct {
		Listen      string `json:"listen"`
		AdminListen string `json:"admin_listen"`
	}
	if err := json.Unmarshal(b, &a); err != nil {
		return fmt.Errorf("%s: %v: %s", src, err, b)
	}
	if a.Listen == "" || a.AdminListen == "" {
		return fmt.Errorf("%s lacks listen or admin_listen: %s", src, b)
	}
	p.Listen, p.AdminListen = a.Listen, a.AdminListen
	return nil
}

// URL is "http://" and the public listener's address.
func (p *Proc) URL() string { return "http://" + p.Listen }

// AdminURL is "http://" and the admin listener's address.
func (p *Proc) AdminURL() string { return "http://" + p.AdminListen }

// Metrics returns the Prometheus text of the admin listener's /metrics. A
// failed request, or an answer other than 200 (within 5 s), fails tb.
func (p *Proc) Metrics() string {
	p.tb.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(p.AdminURL() + "/metrics")
	if err != nil {
		p.tb.Fatalf("%s: GET /metrics: %v", p.Name, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		p.tb.Fatalf("%s: GET /metrics: %s %v", p.Name, resp.Status, err)
	}
	return string(body)
}

// WaitReady polls /readyz on the admin listener until it answers 200. A
// process that exits first fails tb; one that is not ready within timeout
// (0 is StartTimeout) fails tb as an overrun, naming the last answer.
func (p *Proc) WaitReady(timeout time.Duration) {
	p.tb.Helper()
	if timeout <= 0 {
		timeout = StartTimeout
	}
	last, ok := p.PollReady(timeout)
	switch {
	case ok:
	case p.Exited():
		p.tb.Fatalf("%s exited (%v) before /readyz answered 200; log:\n%s", p.Name, p.exit, p.Logs.Tail(60))
	default:
		FatalOverrun(p.tb, "%s: /readyz not 200 within %v (last: %s)", p.Name, timeout, last)
	}
}

// PollReady polls /readyz every 10 ms until it answers 200 (true), the
// process exits or timeout passes (false). last describes the last answer.
// One poll is bounded by 2 s.
func (p *Proc) PollReady(timeout time.Duration) (last string, ok bool) {
	deadline := time.Now().Add(timeout)
	c := &http.Client{Timeout: 2 * time.Second}
	last = "no answer"
	for {
		if p.Exited() {
			return "exited", false
		}
		resp, err := c.Get(p.AdminURL() + "/readyz")
		if err != nil {
			last = err.Error()
		} else {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return resp.Status, true
			}
			last = resp.Status
		}
		if time.Now().After(deadline) {
			return last, false
		}
		time.Sleep(10 * time.Millisecond) // polling another process
	}
}

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// ExitErr is the process's exit status (nil for exit 0); valid once Done is
// closed.
func (p *Proc) ExitErr() error {
	<-p.done
	return p.exit
}

// Wait waits for the process to exit, at most timeout, and returns its exit
// status; at the deadline it fails tb as an overrun (the process keeps
// running until Stop).
func (p *Proc) Wait(timeout time.Duration) error {
	p.tb.Helper()
	select {
	case <-p.done:
		return p.exit
	case <-time.After(timeout):
		FatalOverrun(p.tb, "%s still running %v after it was expected to exit", p.Name, timeout)
		return nil
	}
}

// Signal sends sig to the process, failing tb if it cannot be sent.
func (p *Proc) Signal(sig os.Signal) {
	p.tb.Helper()
	if err := p.Cmd.Process.Signal(sig); err != nil && !p.Exited() {
		p.tb.Fatalf("%s: %v: %v", p.Name, sig, err)
	}
}

var errStopOverrun = errors.New("did not exit after SIGTERM")

// Stop sends SIGTERM and waits for the process to exit, for at most its
// stop timeout; past that it kills the process and returns an error that
// says so (the cleanup Start registers reports it as an overrun). Otherwise
// it returns the exit status. Stopping again returns the same result.
func (p *Proc) Stop() error {
	p.stopOnce.Do(func() {
		if !p.Exited() {
			_ = p.Cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.done:
			case <-time.After(p.stopTimeout):
				_ = p.Cmd.Process.Kill()
				<-p.done
				p.stopErr = fmt.Errorf("%w within %v; killed", errStopOverrun, p.stopTimeout)
				return
			}
		}
		p.stopErr = p.exit
	})
	return p.stopErr
}
