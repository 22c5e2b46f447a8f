package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is a child process started in its own process group, so that it and
// everything it forks (nginx workers) can be measured and stopped together.
type proc struct {
	name string
	cmd  *exec.Cmd
	// pgid is the process group id, equal to the child's pid.
	pgid int
	done chan struct{} // closed when the process has exited
	// stdin, when not nil, is the write end of the child's stdin; closing
	// it tells a bench-owned child to exit.
	stdin io.WriteCloser

	stopOnce sync.Once

	mu   sync.Mutex
	tail []string // last lines of output, for error messages
}

// procs is the set of children of one run; stopAll ends them all.
type procs struct {
	mu   sync.Mutex
	list []*proc
}

// start starts cmd in a new process group that receives SIGKILL (SIGTERM
// for nginx, whose master then stops its workers) if this process dies.
// Each line of the child's stdout and stderr goes to onLine (which may be
// nil) and into a short tail kept for error messages.
func (ps *procs) start(name string, cmd *exec.Cmd, deathSig syscall.Signal, onLine func(string)) (*proc, error) {
	cmd.SysProcAttr = procAttr(deathSig)
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = cmd.Stdout // one pipe, so lines keep their order
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	p.pgid = cmd.Process.Pid
	p.stdin = stdin
	ps.mu.Lock()
	ps.list = append(ps.list, p)
	ps.mu.Unlock()
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.tail = append(p.tail, line)
			if len(p.tail) > 20 {
				p.tail = p.tail[1:]
			}
			p.mu.Unlock()
			if onLine != nil {
				onLine(line)
			}
		}
		_, _ = io.Copy(io.Discard, out)
		_ = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// output returns the last lines the child wrote.
func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.tail, "\n")
}

// exited reports whether the child has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop asks the process group to terminate (SIGTERM, stdin closed) and
// kills it after grace. Only the first call does anything.
func (p *proc) stop(grace time.Duration) {
	p.stopOnce.Do(func() { p.terminate(grace) })
}

func (p *proc) terminate(grace time.Duration) {
	if p.exited() {
		_ = syscall.Kill(-p.pgid, syscall.SIGKILL) // leftovers such as nginx workers
		return
	}
	_ = p.stdin.Close()
	_ = syscall.Kill(-p.pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
	}
	_ = syscall.Kill(-p.pgid, syscall.SIGKILL)
	<-p.done
}

// stopAll stops every child, in reverse order of starting.
func (ps *procs) stopAll() {
	ps.mu.Lock()
	list := ps.list
	ps.list = nil
	ps.mu.Unlock()
	var wg sync.WaitGroup
	for i := len(list) - 1; i >= 0; i-- {
		wg.Add(1)
		go func(p *proc) {
			defer wg.Done()
			p.stop(3 * time.Second)
		}(list[i])
	}
	wg.Wait()
}

// waitFor polls check every 20ms until it returns nil, the child exits,
// timeout passes or ctx is done.
func (p *proc) waitFor(ctx context.Context, timeout time.Duration, what string, check func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return nil
		}
		if p.exited() {
			return fmt.Errorf("%s exited before %s: %v\n%s", p.name, what, err, p.output())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: no %s within %v: %v\n%s", p.name, what, timeout, err, p.output())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond): // polling an external process
		}
	}
}

// freePort returns a port on 127.0.0.1 that was free a moment ago, for
// programs (redis-server, nginx) that cannot report the port they bound.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat;
// it is 100 on every Linux architecture Go supports.
const clockTicks = 100

// statTimes parses one /proc/<pid>/stat line and returns its process group
// and utime+stime in clock ticks.
func statTimes(line string) (pgrp int, ticks uint64, err error) {
	// The command name (field 2) is in parentheses and may itself contain
	// spaces and parentheses: fields resume after the last ')'.
	i := strings.LastIndexByte(line, ')')
	if i < 0 {
		return 0, 0, errors.New("stat: no command name")
	}
	f := strings.Fields(line[i+1:])
	// f[0] is field 3 (state): pgrp is field 5, utime 14, stime 15.
	if len(f) < 13 {
		return 0, 0, fmt.Errorf("stat: %d fields after the command name, want at least 13", len(f))
	}
	pgrp, err = strconv.Atoi(f[2])
	if err != nil {
		return 0, 0, fmt.Errorf("stat: pgrp: %w", err)
	}
	ut, err := strconv.ParseUint(f[11], 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("stat: utime: %w", err)
	}
	st, err := strconv.ParseUint(f[12], 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("stat: stime: %w", err)
	}
	return pgrp, ut + st, nil
}

// cpuTicks returns the CPU time (user+system, clock ticks) used so far by
// the live processes of each given process group, scanning /proc once.
func cpuTicks(pgids []int) (map[int]uint64, error) {
	want := make(map[int]bool, len(pgids))
	for _, g := range pgids {
		want[g] = true
	}
	out := make(map[int]uint64, len(pgids))
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("reading /proc (CPU per request needs Linux): %w", err)
	}
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // exited meanwhile
		}
		g, t, err := statTimes(string(b))
		if err != nil || !want[g] {
			continue
		}
		out[g] += t
	}
	return out, nil
}

// selfTicks returns this process's CPU time in clock ticks.
func selfTicks() (uint64, error) {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0, err
	}
	_, t, err := statTimes(string(b))
	return t, err
}

// ticksToMicros converts clock ticks to microseconds.
func ticksToMicros(t uint64) float64 { return float64(t) * 1e6 / clockTicks }
