package telemetry

import (
	"sync"
	"time"
)

// maxLimiterKeys bounds the per-key state of a LogLimiter. When a new key
// finds it full, keys whose window has ended and that owe no suppressed
// count are dropped; if none can be, the new key's line is let through
// without being tracked, so memory stays bounded whatever the keys.
const maxLimiterKeys = 1024

// LogLimiter lets through at most perInterval log lines per key in each
// interval and counts the lines it holds back, so that an outage repeating
// the same error cannot flood the log. The next line let through for a key
// reports how many were held back since the previous one, typically as a
// "suppressed" field. Windows are fixed: a key's window starts at its first
// line and lasts interval. Safe for concurrent use.
type LogLimiter struct {
	per      int
	interval time.Duration
	now      func() time.Time

	mu   sync.Mutex
	keys map[string]*limitWindow
}

type limitWindow struct {
	start      time.Time
	count      int // lines let through in the current window
	suppressed int // lines held back since the last one let through
}

// NewLogLimiter returns a limiter allowing perInterval lines per key per
// interval. perInterval below 1 is taken as 1. An interval of zero or less
// disables limiting: every line is let through. now is the clock; nil means
// time.Now.
func NewLogLimiter(perInterval int, interval time.Duration, now func() time.Time) *LogLimiter {
	if perInterval < 1 {
		perInterval = 1
	}
	if now == nil {
		now = time.Now
	}
	return &LogLimiter{per: perInterval, interval: interval, now: now, keys: map[string]*limitWindow{}}
}

// Allow reports whether a line for key may be logged now. When ok is true,
// suppressed is the number of lines for key held back since the last line let
// through (0 if none); when ok is false the line is counted and suppressed is
// 0. If the clock goes backwards, the key's window restarts.
func (l *LogLimiter) Allow(key string) (ok bool, suppressed int) {
	if l.interval <= 0 {
		return true, 0
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.keys[key]
	if w == nil {
		if len(l.keys) >= maxLimiterKeys {
			l.sweep(now)
			if len(l.keys) >= maxLimiterKeys {
				return true, 0
			}
		}
		w = &limitWindow{start: now}
		l.keys[key] = w
	} else if now.Before(w.start) || now.Sub(w.start) >= l.interval {
		w.start, w.count = now, 0
	}
	if w.count >= l.per {
		w.suppressed++
		return false, 0
	}
	w.count++
	s := w.suppressed
	w.suppressed = 0
	return true, s
}

// sweep drops keys whose window has ended and that owe no suppressed count.
func (l *LogLimiter) sweep(now time.Time) {
	for k, w := range l.keys {
		if w.suppressed == 0 && (now.Before(w.start) || now.Sub(w.start) >= l.interval) {
			delete(l.keys, k)
		}
	}
}
