package regional

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/ratelimit"
)

// Options configure a Layer.
type Options struct {
	// Region names this instance's region; must not be empty.
	Region string
	// Regional is the region's Redis (where the grants, the demand and
	// the reporter's lock live); Owner the global owner.
	Regional redis.UniversalClient
	Owner    *Owner
	// ReportInterval is how often the region reports (> 0). Instances
	// flush their counts and read the grants four times per interval.
	ReportInterval time.Duration
	// LeaseTTL is how long a grant lasts (>= 3 × ReportInterval +
	// Timeout: the reporter's lock lasts 1.5 intervals and a Timeout, and
	// the next instance tries within an interval, so a dead reporter is
	// replaced within one LeaseTTL).
	LeaseTTL time.Duration
	// Timeout bounds one report to the owner and each regional call;
	// 0 means ReportInterval/2.
	Timeout time.Duration
	// Prefix starts the keys in the regional Redis; "" means "qg".
	Prefix string
	// ID names this instance in the reporter's lock; must be unique in
	// the region.
	ID string
	// Now is the clock; nil = time.Now. Instances of a region must agree
	// on it within a small skew: a grant's expiry is written on the
	// reporter's clock and read on each instance's.
	Now    func() time.Time
	Logger *slog.Logger
}

// Layer decides the cross-region items of every batch (ratelimit.Item
// with Region.Leased) on this region's grant, and passes the batch to the
// store below (the regional stack). An item's limit becomes, per key:
//
//   - with a live grant: Rate and Burst of the grant, same Per; a grant of
//     0 (the others hold the whole capacity) denies; while this instance
//     has not read the region's grants for half a report interval, the
//     smaller of the grant and the safe share (see Layer.share);
//   - with none (the key not granted yet in this region, the owner
//     unreachable past the last grant's expiry, or its warm-up):
//     SafeShare of Rate and Burst, rounded down; 0 denies.
//
// A denied cross-region item denies its batch without consuming anything
// (the other items are asked at cost 0). Each instance counts per key the
// units asked and admitted and adds them to the regional Redis; one
// instance of the region at a time (the reporter, see Layer.reporter)
// reports them to the owner and writes the grants back. A Layer is safe
// for concurrent use.
type Layer struct {
	below ratelimit.Store
	o     Options
	keys  keys

	mu     sync.Mutex
	grants map[string]Grant // the region's, as last read
	counts map[string]*count
	// seen are the keys this instance decided, holds a grant of or (on
	// the reporter) reported, for KeyStats and the lease expiries; reports
	// the reporter's last report, by key; policies the per-policy counters
	// (safe-share decisions and lease expiries), bounded by the
	// configuration's policies.
	seen     map[string]*seenKey
	reports  map[string]keyReport
	policies map[string]*PolicyCounts
	// checkedAt is when refresh last looked for expired grants (µs).
	checkedAt int64

	leader atomicBool
	// reportedAt is when the region's reporter last heard from the owner
	// (µs, the reporter's clock), as last read; stats the reporter's
	// last report.
	reportedAt int64
	// readAt is when this instance sent its last read of the grants that
	// succeeded (µs, its clock); 0 before the first.
	readAt        int64
	stats         reportStats
	safeDecisions atomic.Uint64

	stop chan struct{}
	once sync.Once
	done sync.WaitGroup
}

// reportStats is what the reporter saw at its last report, per second.
type reportStats struct {
	demand, admitted, granted float64
	latency                   time.Duration
}

// keyReport is one key of the reporter's last report: units per the
// key's Per.
type keyReport struct{ demand, admitted, granted int64 }

type count struct {
	asked, admitted int64
	limit           ratelimit.Limit
	seen            *seenKey // the key's entry in Layer.seen
}

// seenKey is a key of Layer.seen: its configured limit, its policy
// (ratelimit.Region.Policy; "" for a key only reported), and when this
// instance last decided it (µs; 0 for never).
type seenKey struct {
	limit     ratelimit.Limit
	policy    string
	decidedAt int64
}

// see returns key's entry in l.seen, created when absent (l.mu held).
func (l *Layer) see(key string) *seenKey {
	s := l.seen[key]
	if s == nil {
		s = &seenKey{}
		l.seen[key] = s
	}
	return s
}

// PolicyCounts are the counters of one cross-region policy on this
// instance; they never decrease.
type PolicyCounts struct {
	// SafeDecisions counts its items decided on a safe share (as
	// Stats.SafeDecisions).
	SafeDecisions uint64
	// LeaseExpiries counts its keys whose grant expired before this
	// instance read a renewal, while it was deciding them (it decided the
	// key within a LeaseTTL before the expiry): from then on, it decided
	// them on the safe share. A key no longer asked for is not renewed
	// either (see Layer.report), but its grant expires more than a LeaseTTL
	// after its last decision, so it is not counted.
	LeaseExpiries uint64
}

// keys are the layer's keys in the regional Redis, all in one hash slot.
type keys struct{ asked, admitted, limits, grants, lock, reported string }

func newKeys(prefix string) keys {
	if prefix == "" {
		prefix = "qg"
	}
	p := prefix + ":{regions}:"
	return keys{asked: p + "asked", admitted: p + "admitted", limits: p + "limits", grants: p + "grants", lock: p + "reporter", reported: p + "reported"}
}

// New returns a Layer over below and starts its loops (Close stops them).
func New(below ratelimit.Store, o Options) *Layer {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Timeout <= 0 {
		o.Timeout = o.ReportInterval / 2
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	l := &Layer{below: below, o: o, keys: newKeys(o.Prefix), grants: map[string]Grant{}, counts: map[string]*count{},
		seen: map[string]*seenKey{}, reports: map[string]keyReport{}, policies: map[string]*PolicyCounts{}, stop: make(chan struct{})}
	l.done.Add(2)
	go l.loop(max(o.ReportInterval/4, time.Millisecond), l.refresh)
	go l.loop(o.ReportInterval, l.report)
	return l
}

// loop runs f every period, and never sooner than half a period after
// the previous run ended: a report that took long is still followed by
// half an interval in which every instance reads the grants it wrote
// (see Layer.share).
func (l *Layer) loop(every time.Duration, f func(context.Context)) {
	defer l.done.Done()
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			start := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), l.o.Timeout)
			f(ctx)
			cancel()
			t.Reset(max(every-time.Since(start), every/2))
		}
	}
}

// Close stops the layer's loops (it may be called again); it does not
// close the store below. The reporter's lock lapses on its own.
func (l *Layer) Close() error {
	l.once.Do(func() { close(l.stop) })
	l.done.Wait()
	l.leader.store(false)
	return nil
}

// Leader reports whether this instance is its region's reporter now.
func (l *Layer) Leader() bool { return l.leader.load() }

// Grant returns this region's grant of key as the layer last read it
// (None when it holds none, or it has expired).
func (l *Layer) Grant(key string) Grant {
	l.mu.Lock()
	defer l.mu.Unlock()
	g := l.grants[key]
	if !g.live(l.o.Now().UnixMicro()) {
		return Grant{}
	}
	return g
}

// Decide decides items as the Layer doc says.
func (l *Layer) Decide(ctx context.Context, items []ratelimit.Item) (ratelimit.Decision, error) {
	leased := -1
	for i := range items {
		if items[i].Region.Leased && items[i].Algorithm == ratelimit.TokenBucket {
			leased = i
			break
		}
	}
	if leased < 0 {
		return l.below.Decide(ctx, items)
	}
	now := l.o.Now().UnixMicro()
	batch := make([]ratelimit.Item, len(items))
	copy(batch, items)
	var denied []int // items refused here
	blocking := false
	l.mu.Lock()
	for i := range batch {
		it := &batch[i]
		if !it.Region.Leased || it.Algorithm != ratelimit.TokenBucket {
			continue
		}
		c := l.counts[it.Key]
		if c == nil { // the key's first decision since the last refresh
			c = &count{seen: l.see(it.Key)}
			l.counts[it.Key] = c
			c.seen.limit, c.seen.policy = it.Limit, it.Region.Policy
		}
		c.asked += it.Cost
		c.limit = it.Limit
		c.seen.decidedAt = now
		rate, burst := l.share(it, now)
		if !l.fresh(now) || !l.grants[it.Key].live(now) {
			l.safeDecisions.Add(1)
			if pc := l.policy(it.Region.Policy); pc != nil {
				pc.SafeDecisions++
			}
		}
		if rate <= 0 || burst <= 0 || it.Cost > burst {
			denied = append(denied, i)
			blocking = blocking || !it.Shadow
			continue
		}
		it.Limit.Rate, it.Limit.Burst = rate, burst
	}
	l.mu.Unlock()

	sub := make([]ratelimit.Item, 0, len(batch))
	for i := range batch {
		if !isIn(denied, i) {
			if blocking {
				batch[i].Cost = 0 // the batch is denied: ask, consume nothing
			}
			sub = append(sub, batch[i])
		}
	}
	var d ratelimit.Decision
	if len(sub) > 0 {
		var err error
		if d, err = l.below.Decide(ctx, sub); err != nil {
			return d, err
		}
	} else {
		d = ratelimit.Decision{Allowed: true}
	}
	if len(denied) > 0 {
		results := make([]ratelimit.Result, len(items))
		j := 0
		for i := range items {
			if isIn(denied, i) {
				results[i] = ratelimit.Result{RetryAfter: l.o.ReportInterval}
				continue
			}
			results[i] = d.Results[j]
			j++
		}
		failure, unavailable := d.Failure, d.Unavailable
		d = ratelimit.Summarize(items, results)
		d.Failure, d.Unavailable = failure, unavailable && !d.Allowed
	}
	if d.Allowed {
		l.mu.Lock()
		for i := range items {
			if items[i].Region.Leased && d.Results[i].Allowed {
				if c := l.counts[items[i].Key]; c != nil {
					c.admitted += items[i].Cost
				}
			}
		}
		l.mu.Unlock()
	}
	return d, nil
}

// share returns the rate and burst that it is decided on at now (l.mu
// held): its grant while this instance's read of the grants is fresh,
// the smaller of its grant and its safe share when the read is stale, its
// safe share without a grant.
//
// Fresh is within half a report interval. The owner stops counting a
// region's previous grant at its next report, which comes at least half
// an interval after the reporter wrote the new grant (see loop); so an
// instance whose read is fresh has read the new grant before then, and
// never enforces a grant the owner no longer counts. An instance that
// misses its reads (paused, or its Redis slow) falls within the safe
// shares' term of the bound instead.
func (l *Layer) share(it *ratelimit.Item, now int64) (rate, burst int64) {
	s := min(max(it.Region.SafeShare, 0), 1)
	safeRate, safeBurst := int64(float64(it.Limit.Rate)*s), int64(float64(it.Limit.Burst)*s)
	g := l.grants[it.Key]
	switch {
	case !g.live(now):
		return safeRate, safeBurst
	case l.fresh(now):
		return g.Rate, g.Burst
	}
	return min(g.Rate, safeRate), min(g.Burst, safeBurst)
}

// fresh reports whether the last read of the grants is within half a
// report interval of now (l.mu held).
func (l *Layer) fresh(now int64) bool {
	return l.readAt > 0 && now-l.readAt <= l.o.ReportInterval.Microseconds()/2
}

// policy returns the counters of policy name (l.mu held), created at its
// first use; nil for "".
func (l *Layer) policy(name string) *PolicyCounts {
	if name == "" {
		return nil
	}
	pc := l.policies[name]
	if pc == nil {
		pc = &PolicyCounts{}
		l.policies[name] = pc
	}
	return pc
}

// expire counts, in LeaseExpiries, the grants that were live at the last
// check and are no longer at now (no renewal read in between), of the
// keys this instance decided within a LeaseTTL before their expiry (l.mu
// held).
func (l *Layer) expire(now int64) {
	ttl := l.o.LeaseTTL.Microseconds()
	for k, g := range l.grants {
		if !g.live(l.checkedAt) || g.live(now) {
			continue
		}
		if s := l.seen[k]; s != nil && s.decidedAt >= g.Expires-ttl {
			if pc := l.policy(s.policy); pc != nil {
				pc.LeaseExpiries++
			}
		}
	}
	l.checkedAt = now
}

func isIn(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// refresh adds this instance's counts to the regional Redis and reads the
// region's grants. A failure keeps the counts for the next try and the
// grants as they were (each until it expires).
func (l *Layer) refresh(ctx context.Context) {
	l.mu.Lock()
	l.expire(l.o.Now().UnixMicro())
	counts := l.counts
	l.counts = map[string]*count{}
	l.mu.Unlock()
	pipe := l.o.Regional.TxPipeline()
	for k, c := range counts {
		pipe.HIncrBy(ctx, l.keys.asked, k, c.asked)
		pipe.HIncrBy(ctx, l.keys.admitted, k, c.admitted)
		pipe.HSet(ctx, l.keys.limits, k, formatLimit(c.limit))
	}
	if len(counts) > 0 {
		pipe.PExpire(ctx, l.keys.limits, 4*l.o.LeaseTTL)
	}
	get := pipe.HGetAll(ctx, l.keys.grants)
	reported := pipe.Get(ctx, l.keys.reported)
	sent := l.o.Now().UnixMicro()
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		l.mu.Lock()
		for k, c := range counts { // try again next time
			if n := l.counts[k]; n != nil {
				n.asked += c.asked
				n.admitted += c.admitted
			} else {
				l.counts[k] = c
			}
		}
		l.mu.Unlock()
		l.o.Logger.Debug("regions: refresh failed", slog.String("error", err.Error()))
		return
	}
	grants := map[string]Grant{}
	for k, v := range get.Val() {
		if g, _, ok := parseGrant(v); ok {
			grants[k] = g
		}
	}
	at, _ := reported.Int64()
	l.mu.Lock()
	l.grants = grants
	l.reportedAt = at
	l.readAt = sent
	for k := range l.seen {
		if _, ok := grants[k]; !ok && l.counts[k] == nil {
			delete(l.seen, k)
		}
	}
	l.mu.Unlock()
}

// Stats is what a Layer reports of its region for metrics. Rates are in
// units per second, summed over the keys (each key's per-Per rate scaled
// to a second).
type Stats struct {
	Region string
	// Reporter reports whether this instance is the region's reporter;
	// Demand, Admitted, Granted and ReportLatency are those of its last
	// report (0 on the other instances).
	Reporter                  bool
	Demand, Admitted, Granted float64
	ReportLatency             time.Duration
	// Keys is the number of keys this instance holds a live grant of.
	Keys int
	// SinceReport is how long ago the region's reporter last heard from
	// the owner (as of this instance's last read of the regional Redis);
	// -1 when it never has. Past the lease TTL, the region decides on its
	// safe shares: a partition.
	SinceReport time.Duration
	// SafeDecisions counts the cross-region items this instance decided
	// on a safe share (no live grant), since it started.
	SafeDecisions uint64
	// Policies are the counters of each policy (ratelimit.Region.Policy)
	// this instance decided an item of, since it started.
	Policies map[string]PolicyCounts
}

// Stats returns the Layer's Stats now.
func (l *Layer) Stats() Stats {
	now := l.o.Now().UnixMicro()
	l.mu.Lock()
	defer l.mu.Unlock()
	s := Stats{Region: l.o.Region, Reporter: l.leader.load(), SafeDecisions: l.safeDecisions.Load(), SinceReport: -1,
		Policies: make(map[string]PolicyCounts, len(l.policies))}
	for name, pc := range l.policies {
		s.Policies[name] = *pc
	}
	if s.Reporter {
		s.Demand, s.Admitted, s.Granted, s.ReportLatency = l.stats.demand, l.stats.admitted, l.stats.granted, l.stats.latency
	}
	for _, g := range l.grants {
		if g.live(now) {
			s.Keys++
		}
	}
	if l.reportedAt > 0 {
		s.SinceReport = time.Duration(max(now-l.reportedAt, 0)) * time.Microsecond
	}
	return s
}

func formatLimit(l ratelimit.Limit) string {
	return strconv.FormatInt(l.Rate, 10) + " " + strconv.FormatInt(l.Burst, 10) + " " + strconv.FormatInt(l.Per.Microseconds(), 10)
}

func parseLimit(s string) (ratelimit.Limit, bool) {
	n, ok := parseInts(s, 3)
	if !ok || n[0] < 1 || n[1] < 1 || n[2] < 1 {
		return ratelimit.Limit{}, false
	}
	return ratelimit.Limit{Rate: n[0], Burst: n[1], Per: time.Duration(n[2]) * time.Microsecond}, true
}

// A grant in the regional Redis is "rate burst expires last_asked", the
// times in µs on the reporter's clock.
func formatGrant(g Grant, lastAsked int64) string {
	return strconv.FormatInt(g.Rate, 10) + " " + strconv.FormatInt(g.Burst, 10) + " " +
		strconv.FormatInt(g.Expires, 10) + " " + strconv.FormatInt(lastAsked, 10)
}

func parseGrant(s string) (Grant, int64, bool) {
	n, ok := parseInts(s, 4)
	if !ok {
		return Grant{}, 0, false
	}
	return Grant{Rate: n[0], Burst: n[1], Expires: n[2]}, n[3], true
}

func parseInts(s string, want int) ([]int64, bool) {
	f := strings.Fields(s)
	if len(f) != want {
		return nil, false
	}
	out := make([]int64, want)
	for i, p := range f {
		v, err := strconv.ParseInt(p, 10, 64)
		if err != nil || v < 0 {
			return nil, false
		}
		out[i] = v
	}
	return out, true
}

var _ ratelimit.Store = (*Layer)(nil)
