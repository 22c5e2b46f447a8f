package e2e

import (
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"
)

// chaosFleet is the run's gateway processes: n places, each held by one
// instance at a time; the nemesis kills an instance and starts another in
// its place (on new ports). Callers pick among the places that run.
type chaosFleet struct {
	t  testing.TB
	mu sync.Mutex
	// cfgs[k] is the valid config place k's instances are started on and
	// reloaded to (one for all places but on the regions topology, where
	// each place is a region).
	cfgs []*gwConfig
	// places[k] is the instance at place k; nil while it is replaced.
	places []*chaosInstance
	all    []*chaosInstance
	serial int
}

// chaosInstance is one gateway process.
type chaosInstance struct {
	id       int
	g        *gateway
	url      string
	killedAt time.Time // zero while it runs; set under chaosFleet.mu
}

// startChaosFleet starts one instance per config, at its place.
func startChaosFleet(t testing.TB, cfgs []*gwConfig) *chaosFleet {
	f := &chaosFleet{t: t, cfgs: cfgs, places: make([]*chaosInstance, len(cfgs))}
	gws := make([]*gateway, len(cfgs))
	for k, cfg := range cfgs {
		gws[k] = launchGateway(t, fmt.Sprintf("gw%d", k), cfg)
	}
	for k, g := range gws {
		g.proc.WaitReady(0)
		f.places[k] = f.add(g)
	}
	return f
}

func (f *chaosFleet) add(g *gateway) *chaosInstance {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.serial++
	in := &chaosInstance{id: f.serial, g: g, url: g.URL}
	f.all = append(f.all, in)
	return in
}

// pick returns the n-th running instance (round robin).
func (f *chaosFleet) pick(n int) *chaosInstance {
	f.mu.Lock()
	defer f.mu.Unlock()
	var run []*chaosInstance
	for _, in := range f.places {
		if in != nil {
			run = append(run, in)
		}
	}
	return run[n%len(run)]
}

// at returns the instance at place k; nil while it is replaced.
func (f *chaosFleet) at(k int) *chaosInstance {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.places[k]
}

// noteCall marks cc cut when its instance was killed while cc was in
// flight (or had been picked just before).
func (f *chaosFleet) noteCall(in *chaosInstance, cc *chaosCall) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !in.killedAt.IsZero() && cc.Start.Before(in.killedAt.Add(time.Second)) {
		cc.Cut = true
	}
}

// kill SIGKILLs the instance at place k, waits down, then starts a new one
// there on the current config and waits until it is ready. It returns
// when the kill happened.
func (f *chaosFleet) kill(k int, down time.Duration) (time.Time, error) {
	f.mu.Lock()
	in := f.places[k]
	if in == nil {
		f.mu.Unlock()
		return time.Time{}, fmt.Errorf("place %d is being replaced", k)
	}
	run := 0
	for _, o := range f.places {
		if o != nil {
			run++
		}
	}
	if run < 2 {
		f.mu.Unlock()
		return time.Time{}, fmt.Errorf("place %d is the only one running", k)
	}
	f.places[k] = nil
	in.killedAt = time.Now()
	at := in.killedAt
	f.mu.Unlock()
	if err := in.g.proc.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return at, err
	}
	<-in.g.proc.Done()
	time.Sleep(down) // the time the instance stays down
	f.mu.Lock()
	cfg := f.cfgs[k]
	f.mu.Unlock()
	ni := f.add(startGateway(f.t, fmt.Sprintf("gw%d", k), cfg))
	f.mu.Lock()
	f.places[k] = ni
	f.mu.Unlock()
	return at, nil
}

// reload makes each place's config next of it, writes it to the running
// instance's file and sends SIGHUP. It returns the first place's new
// config.
func (f *chaosFleet) reload(next func(*gwConfig) *gwConfig) *gwConfig {
	f.mu.Lock()
	defer f.mu.Unlock()
	for k, in := range f.places {
		f.cfgs[k] = next(f.cfgs[k])
		if in != nil {
			in.g.writeConfig(f.cfgs[k])
			in.g.hup()
		}
	}
	return f.cfgs[0]
}

// reloadInvalid writes a config with an unknown key to every running
// instance, sends SIGHUP, and puts the valid config back after hold
// (without a signal), so that an instance started later reads a valid one.
func (f *chaosFleet) reloadInvalid(hold time.Duration) {
	f.mu.Lock()
	ins := append([]*chaosInstance(nil), f.places...)
	cfgs := append([]*gwConfig(nil), f.cfgs...)
	f.mu.Unlock()
	for k, in := range ins {
		if in != nil {
			valid := in.g.configJSON(cfgs[k])
			writeFileAtomic(f.t, in.g.cfgPath, []byte(valid[:1]+`"chaos_unknown_key": true,`+valid[1:]))
			in.g.hup()
		}
	}
	time.Sleep(hold) // the gateways read the broken file meanwhile
	f.mu.Lock()
	defer f.mu.Unlock()
	for k, in := range ins {
		if in != nil {
			in.g.writeConfig(f.cfgs[k])
		}
	}
}
