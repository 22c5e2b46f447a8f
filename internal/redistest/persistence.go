package redistest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// FailPersistence makes the server refuse every write with MISCONF, as a
// server whose disk failed does: it sets a save point and runs a BGSAVE
// that cannot put its file in place (a directory holds its name), and
// returns once that BGSAVE has failed. restore takes the save point away,
// and with it the refusal. It panics on the shared server.
func (s *Server) FailPersistence(tb testing.TB) (restore func()) {
	if s.shared {
		panic("redistest: FailPersistence on the shared server; start a private one with StartStandalone")
	}
	tb.Helper()
	if err := os.MkdirAll(filepath.Join(s.dir, "dump.rdb", "in-the-way"), 0o755); err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	s.MustDo(tb, "CONFIG", "SET", "save", "3600 1", "stop-writes-on-bgsave-error", "yes")
	s.MustDo(tb, "BGSAVE")
	for deadline := time.Now().Add(StartTimeout); ; {
		info, _ := s.MustDo(tb, "INFO", "persistence").(string)
		if strings.Contains(info, "rdb_last_bgsave_status:err") {
			break
		}
		if time.Now().After(deadline) {
			tb.Fatalf("redistest: BGSAVE on %s did not fail within %v:\n%s", s.Addr, StartTimeout, info)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return func() {
		s.MustDo(tb, "CONFIG", "SET", "save", "")
		_ = os.RemoveAll(filepath.Join(s.dir, "dump.rdb"))
	}
}
