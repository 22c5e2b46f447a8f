//go:build !unix

package redistest

import "os"

// Pausing a process needs job-control signals, which only Unix has; Pause
// and Resume fail the test elsewhere.
var (
	sigStop os.Signal
	sigCont os.Signal
)
