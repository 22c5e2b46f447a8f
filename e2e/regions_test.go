package e2e

import (
	"net/http"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/redistest"
)

// The regions test bed: three regions on loopback, each with its own
// redis-server and gateways, one global redis-server, and a TCP relay
// between each region and the global Redis (latency and partitions on
// command). Numbers are scaled down so that a run lasts some 25 s: a
// global limit of regionRate per second (burst regionBurst), reports every
// regionInterval, grants for regionTTL.
const (
	regionRate     = 100
	regionBurst    = 100
	regionInterval = 200 * time.Millisecond
	regionTTL      = time.Second
	regionSafe     = 0.2
)

type regionBed struct {
	global  *redistest.Server
	relays  []*tcpProxy
	gws     [][]*gateway
	up      *upstream
	names   []string
	started time.Time
}

func startRegionBed(t *testing.T, perRegion []int) *regionBed {
	t.Helper()
	b := &regionBed{global: redistest.StartStandalone(t), up: startUpstream(t), names: []string{"eu", "us", "ap"}}
	for i, name := range b.names {
		rs := redistest.StartStandalone(t)
		relay := startTCPProxy(t, b.global.Addr)
		b.relays = append(b.relays, relay)
		cfg := limiterConfig(b.up.URL(), []string{rs.Addr}, "acme")
		cfg.Store.Region = name
		cfg.Store.Global = &globalCfg{Redis: redisCfg{Addrs: []string{relay.Addr}, Timeout: "300ms"},
			ReportInterval: regionInterval.String(), LeaseTTL: regionTTL.String()}
		cfg.Policies["quota"] = policyCfg{OnStoreError: "closed", Limits: map[string]limitCfg{"std": bucket(regionRate, "1s", regionBurst)},
			Regions: &regionsCfg{Mode: "leased", SafeShare: regionSafe}}
		cfg.route("items.get", "GET", "/ok/{rest...}", 1, "quota")
		b.gws = append(b.gws, startGateways(t, perRegion[i], cfg))
	}
	b.started = time.Now()
	return b
}

// admission is one answered request.
type admission struct {
	at     time.Duration // since the bed started
	region int
	status int
}

// drive sends, from each region, rates[i] requests per second (spread over
// its gateways, 10 ms apart) until stop, and records every answer.
func (b *regionBed) drive(t *testing.T, rates func() []int, stop <-chan struct{}) []admission {
	var mu sync.Mutex
	var out []admission
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 2 * time.Second}
	for i := range b.names {
		wg.Go(func() {
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			n := 0
			carry := 0.0
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				carry += float64(rates()[i]) / 100
				for ; carry >= 1; carry-- {
					gw := b.gws[i][n%len(b.gws[i])]
					n++
					req, _ := http.NewRequest("GET", gw.URL+"/ok/x", nil)
					req.Header.Set("Authorization", "Bearer key-acme")
					resp, err := client.Do(req)
					if err != nil {
						continue // counted as unanswered by its absence
					}
					resp.Body.Close()
					mu.Lock()
					out = append(out, admission{at: time.Since(b.started), region: i, status: resp.StatusCode})
					mu.Unlock()
				}
			}
		})
	}
	<-stop
	wg.Wait()
	sort.Slice(out, func(i, j int) bool { return out[i].at < out[j].at })
	return out
}

// admittedIn counts the 200s answered in [from, to).
func admittedIn(as []admission, from, to time.Duration) int {
	n := 0
	for _, a := range as {
		if a.status == 200 && a.at >= from && a.at < to {
			n++
		}
	}
	return n
}

// TestRegionsShiftingDemand (scenario 2): one tenant, one global limit;
// demand twice the limit, split 70/20/10 across the regions, then
// 10/20/70. Admissions, counted by the upstream, never exceed the bound
// of docs/concepts/regions.md in any window, and within three report
// intervals of each shift the regions use at least 90 % of the limit.
func TestRegionsShiftingDemand(t *testing.T) {
	b := startRegionBed(t, []int{2, 1, 1})
	const phase = 8 * time.Second
	demand := 2 * regionRate
	var shifted time.Time
	var smu sync.Mutex
	rates := func() []int {
		smu.Lock()
		defer smu.Unlock()
		if shifted.IsZero() {
			return []int{demand * 70 / 100, demand * 20 / 100, demand * 10 / 100}
		}
		return []int{demand * 10 / 100, demand * 20 / 100, demand * 70 / 100}
	}
	stop := make(chan struct{})
	go func() {
		time.Sleep(phase) // the length of the first phase, not synchronization
		smu.Lock()
		shifted = time.Now()
		smu.Unlock()
		time.Sleep(phase)
		close(stop)
	}()
	as := b.drive(t, rates, stop)
	shift := shifted.Sub(b.started)
	end := shift + phase

	upstream := len(b.up.requests())
	ok := admittedIn(as, 0, end+time.Hour)
	if upstream != ok {
		t.Errorf("upstream saw %d requests, clients got %d 200s", upstream, ok)
	}
	// The bound (docs/concepts/regions.md): while connected, admissions in
	// any window of length T ≤ burst + rate×T; the first lease TTL (the
	// owner's warm-up, every region on its safe share) adds Σ safe shares.
	for _, w := range []time.Duration{time.Second, 4 * time.Second} {
		for from := time.Duration(0); from+w <= end; from += 100 * time.Millisecond {
			got := admittedIn(as, from, from+w)
			bound := regionBurst + int(regionRate*w.Seconds())
			if from < regionTTL+regionInterval {
				bound += int(3 * regionSafe * (regionBurst + regionRate*w.Seconds()))
			}
			if got > bound {
				t.Errorf("window [%v, %v): %d admitted > bound %d", from, from+w, got, bound)
			}
		}
	}
	// Utilisation: from three report intervals after each change (the
	// start's warm-up included) to the end of its phase.
	for _, p := range []struct {
		name     string
		from, to time.Duration
	}{{"70/20/10", regionTTL + 3*regionInterval, shift}, {"10/20/70", shift + 3*regionInterval, end}} {
		got := admittedIn(as, p.from, p.to)
		offered := 0
		for _, a := range as {
			if a.at >= p.from && a.at < p.to {
				offered++
			}
		}
		want := 0.9 * regionRate * (p.to - p.from).Seconds()
		t.Logf("%s: %d admitted of %d answered in [%v, %v), %.0f%% of the limit", p.name, got, offered, p.from.Round(time.Millisecond), p.to.Round(time.Millisecond),
			100*float64(got)/(regionRate*(p.to-p.from).Seconds()))
		if float64(got) < want {
			t.Errorf("%s: %d admitted, want >= %.0f (90%% of the limit)", p.name, got, want)
		}
	}
	per := make([]int, 3)
	for _, a := range as {
		if a.status == 200 && a.at >= shift+3*regionInterval {
			per[a.region]++
		}
	}
	t.Logf("after the shift, admitted per region (eu, us, ap): %v", per)
	if per[2] <= per[0] {
		t.Errorf("after the shift ap admitted %d, eu %d: the grants did not follow the demand", per[2], per[0])
	}
}
