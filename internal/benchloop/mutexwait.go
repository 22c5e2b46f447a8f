package benchloop

import (
	"runtime/metrics"
	"testing"
)

// mutexWaitMetric is the runtime's total time goroutines spent blocked on
// a sync.Mutex or sync.RWMutex, in seconds since the process started.
const mutexWaitMetric = "/sync/mutex/wait/total:seconds"

// MutexWait returns the seconds the process's goroutines have spent
// blocked on sync mutexes so far (0 where the runtime does not say).
func MutexWait() float64 {
	s := []metrics.Sample{{Name: mutexWaitMetric}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64 {
		return 0
	}
	return s[0].Value.Float64()
}

// ReportMutexWait reports as "mutex-wait-ns/op" the time the process's
// goroutines spent blocked on sync mutexes since MutexWait returned
// since, per one of b's b.N operations: how much its callers queued on
// locks rather than worked.
func ReportMutexWait(b *testing.B, since float64) {
	if b.N > 0 {
		b.ReportMetric((MutexWait()-since)*1e9/float64(b.N), "mutex-wait-ns/op")
	}
}
