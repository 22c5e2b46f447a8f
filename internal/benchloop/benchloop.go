// Package benchloop runs a benchmark's operation over concurrent callers and
// reports what the project's benchmarks compare: throughput, latency
// percentiles and the process's CPU time per operation.
package benchloop

import (
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Run calls op b.N times over conc callers (one goroutine when conc is 1,
// else b.RunParallel with conc/GOMAXPROCS per processor), passing each call
// a sequence number from 1. The first error stops its caller and fails b.
// It reports decisions/s, p50-µs and p99-µs (see ReportLatency) and the
// process's user + system CPU time per call as cpuMetric (such as
// "cpu-µs/op"), where the platform lets it be read.
func Run(b *testing.B, conc int, cpuMetric string, op func(seq int) error) {
	var seq atomic.Int64
	var mu sync.Mutex
	var lat []time.Duration
	worker := func(next func() bool) {
		local := make([]time.Duration, 0, 1024)
		for next() {
			start := time.Now()
			err := op(int(seq.Add(1)))
			local = append(local, time.Since(start))
			if err != nil {
				b.Error(err)
				break
			}
		}
		mu.Lock()
		lat = append(lat, local...)
		mu.Unlock()
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0, cpuOK := ProcessCPU()
	start := time.Now()
	if conc == 1 {
		i := 0
		worker(func() bool { i++; return i <= b.N })
	} else {
		b.SetParallelism(max(1, conc/runtime.GOMAXPROCS(0)))
		b.RunParallel(func(pb *testing.PB) { worker(pb.Next) })
	}
	elapsed := time.Since(start)
	b.StopTimer()
	if cpu1, ok := ProcessCPU(); ok && cpuOK && b.N > 0 {
		b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(b.N), cpuMetric)
	}
	ReportLatency(b, lat, elapsed)
}

// ReportLatency reports len(lat)/elapsed as decisions/s and the median and
// 99th percentile of lat as p50-µs and p99-µs. It sorts lat; an empty lat
// reports nothing.
func ReportLatency(b *testing.B, lat []time.Duration, elapsed time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) }
	b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "decisions/s")
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
}
