package redistest

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"unicode"
)

var shared struct {
	mu  sync.Mutex
	srv *Server
	dir string
}

// Shared returns a standalone server shared by every test of the test
// binary, starting it on first use. Tests sharing it must not Pause, Kill or
// Restart it (those panic) and must keep to their own keys: see KeyPrefix.
//
// Call RunMain from TestMain to stop it when the tests end; without that the
// server is killed when the test binary exits (on Linux) but its temporary
// directory stays.
func Shared(tb testing.TB) *Server {
	tb.Helper()
	bin := RedisServerPath(tb)
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.srv != nil {
		return shared.srv
	}
	dir, err := os.MkdirTemp("", "redistest-shared-")
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	s, err := newServer(bin, dir, false)
	if err != nil {
		_ = os.RemoveAll(dir)
		tb.Fatalf("redistest: %v", err)
	}
	s.shared = true
	shared.srv, shared.dir = s, dir
	return s
}

// RunMain runs the tests and then stops the shared server, if one was
// started. Use it as
//
//	func TestMain(m *testing.M) { os.Exit(redistest.RunMain(m)) }
func RunMain(m *testing.M) int {
	code := m.Run()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.srv != nil {
		shared.srv.kill()
		_ = os.RemoveAll(shared.dir)
		shared.srv = nil
	}
	return code
}

var prefixSeq atomic.Uint64

// KeyPrefix returns a prefix unique to this call within the test binary,
// derived from tb's name, for keys on a shared server: "t7.TestName:". It
// contains no "{" or "}", so it never changes a key's hash tag.
func KeyPrefix(tb testing.TB) string {
	name := strings.Map(func(r rune) rune {
		if r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_' || r == '-' || r == '/') {
			return r
		}
		return '_'
	}, tb.Name())
	return fmt.Sprintf("t%d.%d.%s:", os.Getpid(), prefixSeq.Add(1), name)
}
