package proctest

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ErrNoRSS is returned by PeakRSS where the system does not report it
// (no /proc).
var ErrNoRSS = errors.New("peak resident memory is not reported on this system")

// PeakRSS returns the peak resident memory of process pid in bytes (Linux
// VmHWM): what the process ever held at once, however briefly.
func PeakRSS(pid int) (int64, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrNoRSS, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("VmHWM %q: %w", rest, err)
			}
			return kb << 10, nil
		}
	}
	return 0, ErrNoRSS
}
