package local

import (
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// localBenchKeys returns n distinct keys shaped like anonymous callers.
func localBenchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "ip:10." + strconv.Itoa(i>>16&255) + "." + strconv.Itoa(i>>8&255) + "." + strconv.Itoa(i&255)
	}
	return keys
}

func BenchmarkLocalAllowHotKey(b *testing.B) {
	s := New(Options{Rate: 1e9, Burst: 1 << 30})
	now := localT0
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			s.Allow("ip:203.0.113.7", now, 1)
		}
	})
}

// BenchmarkLocalAllowDistinctKeys spreads calls over 1,000,000 callers that
// all hold a limiter already (the set is filled first): the cost of a lookup
// in a large, cache-cold set.
func BenchmarkLocalAllowDistinctKeys(b *testing.B) {
	const n = 1_000_000
	keys := localBenchKeys(n)
	s := New(Options{Rate: 50, Burst: 1 << 30})
	now := localT0
	for _, k := range keys {
		s.Allow(k, now, 1)
	}
	var next atomic.Uint64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := next.Add(n / 7) // goroutines start far apart in the key space
		for pb.Next() {
			i++
			s.Allow(keys[i%n], now, 1)
		}
	})
	if s.Len() != n {
		b.Fatalf("Len = %d, want %d", s.Len(), n)
	}
}

// BenchmarkLocalAllowNewKeys measures callers seen for the first time:
// every call creates a limiter (up to the default cap of 1,000,000).
func BenchmarkLocalAllowNewKeys(b *testing.B) {
	const n = 1_000_000
	keys := localBenchKeys(n)
	s := New(Options{Rate: 50, Burst: 100})
	var next atomic.Uint64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			s.Allow(keys[next.Add(1)%n], localT0, 1)
		}
	})
}

// BenchmarkLocalAllowSpray measures callers that all go to the overflow
// limiter: the set is at its cap and nobody is evictable.
func BenchmarkLocalAllowSpray(b *testing.B) {
	const n = 1 << 20
	keys := localBenchKeys(n)
	s := New(Options{Rate: 1e-6, Burst: 100, MaxLimiters: 10_000})
	for _, k := range keys[:10_000] {
		s.Allow(k, localT0, 1)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := rand.Uint64()
		for pb.Next() {
			i++
			s.Allow(keys[i%n], localT0, 1)
		}
	})
}

// BenchmarkLocalBytesPerLimiter reports the heap held per live limiter,
// including its key ("ip:10.x.y.z", 12 to 14 bytes) and its map slot.
func BenchmarkLocalBytesPerLimiter(b *testing.B) {
	const n = 200_000
	for b.Loop() {
		b.StopTimer()
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		b.StartTimer()
		s := New(Options{Rate: 1, Burst: 10})
		now := localT0.Add(time.Second)
		for i := range n {
			// Keys are built here so that the set owns their bytes.
			s.Allow("ip:10."+strconv.Itoa(i>>16&255)+"."+strconv.Itoa(i>>8&255)+"."+strconv.Itoa(i&255), now, 1)
		}
		b.StopTimer()
		runtime.GC()
		runtime.ReadMemStats(&after)
		if s.Len() != n {
			b.Fatalf("Len = %d, want %d", s.Len(), n)
		}
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "bytes/limiter")
		runtime.KeepAlive(s)
		b.StartTimer()
	}
}
