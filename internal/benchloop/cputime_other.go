//go:build !unix

package benchloop

import "time"

// ProcessCPU reports that the process's CPU time cannot be read here.
func ProcessCPU() (time.Duration, bool) { return 0, false }
