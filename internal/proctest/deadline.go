package proctest

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// OverrunPrefix starts the message of every failure reported by Overrun and
// FatalOverrun, so a missed deadline can be told from a wrong answer in a
// test log (grep for it).
const OverrunPrefix = "missed deadline: "

// Overrun fails tb for a bound on time the run did not meet, not for a wrong
// answer: the message starts with OverrunPrefix and ends with the machine's
// load average, and the test goes on.
func Overrun(tb testing.TB, format string, args ...any) {
	tb.Helper()
	tb.Error(overrunMsg(format, args...))
}

// FatalOverrun is Overrun that stops the test.
func FatalOverrun(tb testing.TB, format string, args ...any) {
	tb.Helper()
	tb.Fatal(overrunMsg(format, args...))
}

func overrunMsg(format string, args ...any) string {
	return OverrunPrefix + fmt.Sprintf(format, args...) + " [" + LoadAverage() + "]"
}

// LoadAverage describes the machine's load ("load average 1.20 0.80 0.50"
// over 1, 5 and 15 minutes), or says it is unknown where /proc/loadavg
// cannot be read.
func LoadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "load average unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "load average unknown"
	}
	return "load average " + strings.Join(f[:3], " ")
}
