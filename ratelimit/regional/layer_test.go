package regional

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/memstore"
)

const (
	interval = 100 * time.Millisecond
	leaseTTL = 400 * time.Millisecond
)

// region is one region of a test: its layers (instances) over one memory
// store each, sharing a regional Redis (here: a key prefix of its own on
// the shared server).
type region struct {
	name   string
	layers []*Layer
}

func startRegion(t *testing.T, client *redis.Client, owner *Owner, name string, instances int) *region {
	t.Helper()
	prefix := redistest.KeyPrefix(t) + name
	r := &region{name: name}
	for i := range instances {
		l := New(memstore.New(memstore.Options{}), Options{
			Region: name, Regional: client, Owner: owner, ReportInterval: interval, LeaseTTL: leaseTTL,
			Prefix: prefix, ID: name + "-" + string(rune('a'+i)),
		})
		r.layers = append(r.layers, l)
		t.Cleanup(func() { _ = l.Close() })
	}
	return r
}

var item = ratelimit.Item{Key: "{t}:quota", Algorithm: ratelimit.TokenBucket, Cost: 1, OnError: ratelimit.OnErrorClosed,
	Limit:  ratelimit.Limit{Rate: 1000, Per: time.Second, Burst: 100},
	Region: ratelimit.Region{Leased: true, SafeShare: 0.2}}

// drive asks for cost-1 decisions in r at about perSecond until stop, and
// counts the admissions.
func (r *region) drive(t *testing.T, perSecond int, stop <-chan struct{}, admitted *int64, mu *sync.Mutex) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		for range perSecond / 100 {
			d, err := r.layers[n%len(r.layers)].Decide(context.Background(), []ratelimit.Item{item})
			if err != nil {
				t.Error(err)
				return
			}
			if d.Allowed {
				mu.Lock()
				*admitted++
				mu.Unlock()
			}
		}
	}
}

// TestLayerGrantsFollowDemand: three regions asking 70/20/10 of twice the
// capacity are granted shares that sum to the capacity (never above, at
// any sample), ordered as the demands; then the demand moves to 10/20/70
// and the grants follow.
func TestLayerGrantsFollowDemand(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: redistest.Shared(t).Addr})
	defer client.Close()
	owner := NewOwner(client, OwnerOptions{Prefix: redistest.KeyPrefix(t) + "global"})
	regions := []*region{startRegion(t, client, owner, "eu", 2), startRegion(t, client, owner, "us", 1), startRegion(t, client, owner, "ap", 1)}
	var mu sync.Mutex
	var admitted int64
	for _, shares := range [][]int{{70, 20, 10}, {10, 20, 70}} {
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for i, r := range regions {
			wg.Go(func() { r.drive(t, 2000*shares[i]/100, stop, &admitted, &mu) })
		}
		// Warm-up (the owner's first LeaseTTL) and three intervals.
		deadline := time.Now().Add(leaseTTL + 20*interval)
		settled := false
		for !settled && time.Now().Before(deadline) {
			var sum int64
			g := make([]int64, len(regions))
			for i, r := range regions {
				g[i] = r.layers[0].Grant(item.Key).Rate
				sum += g[i]
			}
			if sum > item.Limit.Rate {
				t.Fatalf("shares %v: grants %v sum to %d > %d", shares, g, sum, item.Limit.Rate)
			}
			busiest := 0
			if shares[0] < shares[2] {
				busiest = 2
			}
			// Max-min fair: the busiest gets at least the middle one's
			// share (equal when both ask more than the level), the least
			// busy less.
			settled = sum >= 990 && g[busiest] >= g[1] && g[1] > g[2-busiest]
			time.Sleep(interval / 4) // sampling, not synchronization
		}
		close(stop)
		wg.Wait()
		if !settled {
			t.Errorf("shares %v: grants did not settle on the demand within %v", shares, leaseTTL+20*interval)
		}
	}
	if admitted == 0 {
		t.Error("nothing admitted")
	}
}

// TestLayerReporterTakeover: one instance of a region is the reporter;
// when it stops, another takes over within three intervals and a timeout.
func TestLayerReporterTakeover(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: redistest.Shared(t).Addr})
	defer client.Close()
	owner := NewOwner(client, OwnerOptions{Prefix: redistest.KeyPrefix(t) + "global"})
	r := startRegion(t, client, owner, "eu", 3)
	leaders := func() (n int, who int) {
		for i, l := range r.layers {
			if l.Leader() {
				n, who = n+1, i
			}
		}
		return n, who
	}
	waitFor := func(what string, within time.Duration, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(within)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %v", what, within)
			}
			time.Sleep(interval / 10)
		}
	}
	waitFor("a reporter", 3*interval, func() bool { n, _ := leaders(); return n == 1 })
	_, who := leaders()
	if err := r.layers[who].Close(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	// The lock lasts 1.5 intervals and a timeout (half an interval) from
	// its last extension; the next try comes within one more.
	waitFor("a new reporter", 4*interval+interval/2, func() bool { n, _ := leaders(); return n == 1 })
	t.Logf("takeover after %v", time.Since(start))
}

// TestLayerSafeShare: without a grant, a key is decided on its safe share
// of the burst; a safe share of 0 denies, consuming nothing of the batch.
func TestLayerSafeShare(t *testing.T) {
	mem := memstore.New(memstore.Options{})
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never reached in time
	defer client.Close()
	l := New(mem, Options{Region: "eu", Regional: client, Owner: NewOwner(client, OwnerOptions{}), ReportInterval: time.Hour, LeaseTTL: 3 * time.Hour})
	defer l.Close()
	it := item
	n := 0
	for {
		d, err := l.Decide(context.Background(), []ratelimit.Item{it})
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed {
			break
		}
		n++
	}
	if n != 20 { // 0.2 × burst 100, refilling 200/s: a few more at most
		if n < 20 || n > 25 {
			t.Errorf("admitted %d on the safe share, want about 20", n)
		}
	}
	other := ratelimit.Item{Key: "{t}:other", Algorithm: ratelimit.TokenBucket, Cost: 1, OnError: ratelimit.OnErrorClosed,
		Limit: ratelimit.Limit{Rate: 1, Per: time.Hour, Burst: 1}}
	it.Region.SafeShare = 0
	d, err := l.Decide(context.Background(), []ratelimit.Item{other, it})
	if err != nil {
		t.Fatal(err)
	}
	if d.Allowed || d.Results[0].Allowed != true || d.Results[1].Allowed {
		t.Fatalf("safe share 0: decision %+v, want denied by the second item", d)
	}
	d, err = l.Decide(context.Background(), []ratelimit.Item{other})
	if err != nil || !d.Allowed {
		t.Fatalf("the denied batch consumed the other item: %+v %v", d, err)
	}
}

// TestLayerShadowDenied: a shadow cross-region item refused here (safe
// share 0, no grant) does not deny its batch, which consumes the others.
func TestLayerShadowDenied(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer client.Close()
	l := New(memstore.New(memstore.Options{}), Options{Region: "eu", Regional: client,
		Owner: NewOwner(client, OwnerOptions{}), ReportInterval: time.Hour, LeaseTTL: 3 * time.Hour})
	defer l.Close()
	other := ratelimit.Item{Key: "{t}:other", Algorithm: ratelimit.TokenBucket, Cost: 1, OnError: ratelimit.OnErrorClosed,
		Limit: ratelimit.Limit{Rate: 1, Per: time.Hour, Burst: 1}}
	shadow := item
	shadow.Shadow, shadow.Region.SafeShare = true, 0
	d, err := l.Decide(context.Background(), []ratelimit.Item{shadow, other})
	if err != nil {
		t.Fatal(err)
	}
	if !d.Allowed || d.Results[0].Allowed || !d.Results[1].Allowed {
		t.Fatalf("decision %+v, want allowed with the shadow item denied", d)
	}
	if d, _ := l.Decide(context.Background(), []ratelimit.Item{other}); d.Allowed {
		t.Fatal("the other item was not consumed by the admitted batch")
	}
}

// TestLayerColdKeyStopsReporting: a key asked for once is reported (the
// owner holds a claim of the region), and once it has not been asked for
// within a lease TTL its claim is no longer renewed: it expires, and
// the key is cold again.
func TestLayerColdKeyStopsReporting(t *testing.T) {
	client, owner := warmOwner(t)
	r := startRegion(t, client, owner, "eu", 1)
	if _, err := r.layers[0].Decide(context.Background(), []ratelimit.Item{item}); err != nil {
		t.Fatal(err)
	}
	claim := func() Claim {
		cls, err := owner.Claims(context.Background(), item.Key)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cls {
			if c.Region == "eu" {
				return c
			}
		}
		return Claim{}
	}
	deadline := time.Now().Add(10 * interval)
	for claim().Grant.None() {
		if time.Now().After(deadline) {
			t.Fatalf("no claim of eu at the owner within %v", 10*interval)
		}
		time.Sleep(interval / 4) // polling Redis
	}
	// Reports stop a lease TTL after the last ask; the claim then expires
	// on the owner's clock (µs), which TIME reads.
	deadline = time.Now().Add(leaseTTL + 10*interval)
	for {
		c := claim()
		now, err := client.Time(context.Background()).Result()
		if err != nil {
			t.Fatal(err)
		}
		if c.Grant.Expires <= now.UnixMicro() && c.Held.Expires <= now.UnixMicro() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the claim of a key not asked for is still renewed %v later: %+v", leaseTTL+10*interval, c)
		}
		time.Sleep(interval / 4) // polling Redis
	}
}

// warmOwner returns a client of the shared redis-server, closed when t
// ends, and an owner on it past its warm-up, so that a first report is
// granted.
func warmOwner(t *testing.T) (*redis.Client, *Owner) {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: redistest.Shared(t).Addr})
	t.Cleanup(func() { _ = client.Close() })
	owner := NewOwner(client, OwnerOptions{Prefix: redistest.KeyPrefix(t) + "global"})
	if err := client.Set(context.Background(), owner.prefix+"epoch", 1, 0).Err(); err != nil {
		t.Fatal(err)
	}
	return client, owner
}

// TestLayerColdKeysLeaveTheRegion: a key no longer asked for leaves the
// region's limits and grants hashes (which every refresh reads whole)
// once its grant is spent, while a key still asked for keeps the hashes
// alive: without that, every key ever granted would stay in them as long
// as any key is warm.
func TestLayerColdKeysLeaveTheRegion(t *testing.T) {
	client, owner := warmOwner(t)
	r := startRegion(t, client, owner, "eu", 1)
	keys := r.layers[0].keys
	once := item
	once.Key = "{u}:quota"
	if _, err := r.layers[0].Decide(context.Background(), []ratelimit.Item{once}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var mu sync.Mutex
	var admitted int64
	done := make(chan struct{})
	go func() { defer close(done); r.drive(t, 200, stop, &admitted, &mu) }()
	defer func() { close(stop); <-done }()

	held := func(hash, key string) bool {
		ok, err := client.HExists(context.Background(), hash, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	deadline := time.Now().Add(10 * interval)
	for !held(keys.grants, once.Key) {
		if time.Now().After(deadline) {
			t.Fatalf("missed deadline: %s was not granted within %v", once.Key, 10*interval)
		}
		time.Sleep(interval / 4) // polling Redis
	}
	// Not asked for again: reported for a lease TTL, its grant spent a
	// lease TTL later, removed by the report after (2 lease TTLs and an
	// interval; the wait allows five times that on a busy machine, and
	// without the removal the key stays for good).
	wait := 5 * (2*leaseTTL + interval)
	deadline = time.Now().Add(wait)
	for held(keys.grants, once.Key) || held(keys.limits, once.Key) {
		if time.Now().After(deadline) {
			t.Fatalf("%s is still in the region's grants (%v) or limits (%v) %v after its last ask", once.Key,
				held(keys.grants, once.Key), held(keys.limits, once.Key), wait)
		}
		time.Sleep(interval / 4) // polling Redis
	}
	if !held(keys.grants, item.Key) || !held(keys.limits, item.Key) {
		t.Errorf("%s, asked for all along, left the region's grants (%v) or limits (%v)", item.Key,
			held(keys.grants, item.Key), held(keys.limits, item.Key))
	}
}

// TestLayerPolicyCounters: the safe-share decisions and the lease expiries
// are counted per policy (Region.Policy). A grant renewed before it
// expires is no expiry; one that expires while the key is decided here
// is one, counted once; one of a key last decided more than a lease TTL
// before its expiry (gone cold, no longer reported) is none. On a clock of
// the test's, with the refreshes called by it.
func TestLayerPolicyCounters(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: redistest.Shared(t).Addr})
	defer client.Close()
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	now := t0.Add(-150 * time.Minute)
	at := func(t time.Time) {
		mu.Lock()
		defer mu.Unlock()
		now = t
	}
	// Intervals of an hour: the layer's own loops do not run in the test.
	l := New(memstore.New(memstore.Options{}), Options{Region: "eu", Regional: client, Owner: NewOwner(client, OwnerOptions{}),
		ReportInterval: time.Hour, LeaseTTL: 3 * time.Hour, Prefix: redistest.KeyPrefix(t), ID: "eu-a",
		Now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }})
	defer l.Close()
	ctx := context.Background()
	of := func(key, policy string) ratelimit.Item {
		it := item
		it.Key, it.Region.Policy = key, policy
		return it
	}
	hot, cold, free := of("{t}:hot", "enterprise"), of("{t}:cold", "enterprise"), of("{t}:free", "free")
	decide := func(it ratelimit.Item) {
		t.Helper()
		if _, err := l.Decide(ctx, []ratelimit.Item{it}); err != nil {
			t.Fatal(err)
		}
	}
	grant := func(key string, expires time.Time) {
		t.Helper()
		if err := client.HSet(ctx, l.keys.grants, key, formatGrant(Grant{Rate: 500, Burst: 50, Expires: expires.UnixMicro()}, t0.UnixMicro())).Err(); err != nil {
			t.Fatal(err)
		}
	}
	refresh := func(t time.Time) { at(t); l.refresh(ctx) }

	decide(cold) // no grant read yet: a safe-share decision of enterprise
	grant(hot.Key, t0.Add(time.Hour))
	grant(cold.Key, t0.Add(time.Hour))
	refresh(t0)
	decide(hot)  // on its grant
	decide(free) // none: a safe-share decision of free
	grant(hot.Key, t0.Add(2*time.Hour))
	refresh(t0.Add(30 * time.Minute)) // the renewal, read before the expiry
	// cold's grant expires, 3.5 h after its last decision: not counted.
	refresh(t0.Add(time.Hour + time.Microsecond))
	// hot's expires without a renewal: counted once.
	refresh(t0.Add(2*time.Hour + time.Microsecond))
	refresh(t0.Add(2*time.Hour + 2*time.Microsecond))
	decide(hot) // on the safe share now

	st := l.Stats()
	want := map[string]PolicyCounts{"enterprise": {SafeDecisions: 2, LeaseExpiries: 1}, "free": {SafeDecisions: 1}}
	if len(st.Policies) != len(want) {
		t.Errorf("counters of %d policies %+v, want %d", len(st.Policies), st.Policies, len(want))
	}
	for p, w := range want {
		if got := st.Policies[p]; got != w {
			t.Errorf("%s: %+v, want %+v", p, got, w)
		}
	}
	if st.SafeDecisions != 3 {
		t.Errorf("SafeDecisions %d, want 3 (the policies' sum)", st.SafeDecisions)
	}
}
