package proctest

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"time"
)

// Logs collects a process's output; safe for concurrent use.
type Logs struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{} // closed and replaced on every write
}

// NewLogs returns an empty Logs.
func NewLogs() *Logs { return &Logs{changed: make(chan struct{})} }

// Write appends p and wakes every waiter on Changed.
func (l *Logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	close(l.changed)
	l.changed = make(chan struct{})
	return l.buf.Write(p)
}

// Changed returns a channel closed by the next Write.
func (l *Logs) Changed() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.changed
}

// String returns everything written so far.
func (l *Logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// Tail returns the last n lines.
func (l *Logs) Tail(n int) string {
	lines := strings.Split(strings.TrimRight(l.String(), "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("[... %d earlier lines]", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// Digest returns up to n lines that are not access-log lines
// ("msg":"request"), the last ones when there are more.
func (l *Logs) Digest(n int) string {
	var keep []string
	skipped := 0
	for _, line := range strings.Split(strings.TrimRight(l.String(), "\n"), "\n") {
		if strings.Contains(line, `"msg":"request"`) {
			skipped++
			continue
		}
		keep = append(keep, line)
	}
	if len(keep) > n {
		keep = append([]string{fmt.Sprintf("[... %d earlier lines]", len(keep)-n)}, keep[len(keep)-n:]...)
	}
	return strings.Join(keep, "\n") + fmt.Sprintf("\n[%d access-log lines left out]", skipped)
}

// WaitLine returns the first line of the output that contains s, waiting
// for it at most timeout; false if none came by then.
func (l *Logs) WaitLine(s string, timeout time.Duration) (string, bool) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		changed := l.Changed()
		for _, line := range strings.Split(l.String(), "\n") {
			if strings.Contains(line, s) {
				return line, true
			}
		}
		select {
		case <-changed:
		case <-deadline.C:
			return "", false
		}
	}
}

// Count returns how many times s occurs in the output.
func (l *Logs) Count(s string) int {
	return strings.Count(l.String(), s)
}
