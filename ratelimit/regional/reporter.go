package regional

import (
	"context"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

type atomicBool struct{ v atomic.Bool }

func (b *atomicBool) load() bool   { return b.v.Load() }
func (b *atomicBool) store(v bool) { b.v.Store(v) }

// holdLock takes the reporter's lock for id, or extends it when id holds
// it already, for ARGV[2] ms: 1 when id holds it after, 0 when another does.
var holdLock = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if not cur then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
if cur == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0`)

// dropCold removes from the region's limits (KEYS[1]) and grants
// (KEYS[2]) each key of ARGV that no instance has asked for since the
// report took the counts (absent from asked, KEYS[3]), so that the two
// hashes, which every refresh reads whole, hold the warm keys only.
var dropCold = redis.NewScript(`
for _, k in ipairs(ARGV) do
  if redis.call('HEXISTS', KEYS[3], k) == 0 then
    redis.call('HDEL', KEYS[1], k)
    redis.call('HDEL', KEYS[2], k)
  end
end
return 0`)

// report runs once per interval on every instance. The reporter of the
// region is elected with a lock in the regional Redis that lasts an
// interval and a half and a Timeout, which its holder extends at each
// report (reports start at most max(interval, Timeout + half an
// interval) apart, see Layer.loop): when it dies, the lock lapses and the first instance to try after takes it over. The
// reporter takes the region's counts (atomically: counts added after go
// to the next report), reports every key asked for, and every key still
// granted that was asked for within a LeaseTTL, to the owner, and writes
// the grants back. A key no longer asked for is no longer reported: its
// grant expires, and it is cold again (decided on its safe share); the
// report after that removes it from the region's limits and grants.
func (l *Layer) report(ctx context.Context) {
	ok, err := holdLock.Run(ctx, l.o.Regional, []string{l.keys.lock}, l.o.ID, (3*l.o.ReportInterval/2 + l.o.Timeout).Milliseconds()).Int()
	if err != nil || ok != 1 {
		if l.leader.load() {
			l.o.Logger.Info("regions: no longer the reporter", slog.String("region", l.o.Region))
		}
		l.leader.store(false)
		return
	}
	if !l.leader.load() {
		l.o.Logger.Info("regions: reporter of the region", slog.String("region", l.o.Region))
		l.leader.store(true)
	}
	pipe := l.o.Regional.TxPipeline()
	asked := pipe.HGetAll(ctx, l.keys.asked)
	admitted := pipe.HGetAll(ctx, l.keys.admitted)
	pipe.Del(ctx, l.keys.asked, l.keys.admitted)
	limits := pipe.HGetAll(ctx, l.keys.limits)
	grants := pipe.HGetAll(ctx, l.keys.grants)
	if _, err := pipe.Exec(ctx); err != nil {
		l.o.Logger.Warn("regions: reading the region's demand failed", slog.String("error", err.Error()))
		return
	}
	now := l.o.Now().UnixMicro()
	interval := l.o.ReportInterval.Microseconds()
	var reports []KeyReport
	var last []int64
	var cold []any
	for k, lv := range limits.Val() {
		lim, ok := parseLimit(lv)
		if !ok {
			cold = append(cold, k)
			continue
		}
		a, _ := strconv.ParseInt(asked.Val()[k], 10, 64)
		adm, _ := strconv.ParseInt(admitted.Val()[k], 10, 64)
		held, lastAsked, _ := parseGrant(grants.Val()[k])
		if a > 0 {
			lastAsked = now
		} else if lastAsked == 0 || now-lastAsked > l.o.LeaseTTL.Microseconds() {
			if !held.live(now) {
				cold = append(cold, k) // not asked for within a LeaseTTL, its grant spent
			}
			continue
		}
		if !held.live(now) {
			held = Grant{}
		}
		// Units asked per Per over the interval, rounded up.
		p := lim.Per.Microseconds()
		demand := (max(a, 0)*p + interval - 1) / interval
		reports = append(reports, KeyReport{Key: k, Limit: lim, Demand: demand, Admitted: adm, Held: held})
		last = append(last, lastAsked)
	}
	if len(cold) > 0 {
		if err := dropCold.Run(ctx, l.o.Regional, []string{l.keys.limits, l.keys.grants, l.keys.asked}, cold...).Err(); err != nil {
			l.o.Logger.Warn("regions: removing cold keys failed", slog.String("error", err.Error()))
		}
	}
	if len(reports) == 0 {
		return
	}
	sent := time.Now()
	got, err := l.o.Owner.Report(ctx, l.o.Region, l.o.LeaseTTL, reports)
	latency := time.Since(sent)
	if err != nil {
		l.o.Logger.Warn("regions: report to the global owner failed", slog.String("region", l.o.Region), slog.String("error", err.Error()))
		return
	}
	var st reportStats
	st.latency = latency
	byKey := make(map[string]keyReport, len(reports))
	for i, r := range reports {
		byKey[r.Key] = keyReport{demand: r.Demand, admitted: r.Admitted * r.Limit.Per.Microseconds() / interval, granted: got[i].Grant.Rate}
		perSecond := float64(time.Second) / float64(r.Limit.Per)
		st.demand += float64(r.Demand) * perSecond
		st.admitted += float64(r.Admitted) * float64(time.Second) / float64(l.o.ReportInterval)
		st.granted += float64(got[i].Grant.Rate) * perSecond
	}
	l.mu.Lock()
	l.stats = st
	l.reports = byKey
	for _, r := range reports {
		l.see(r.Key).limit = r.Limit
	}
	l.mu.Unlock()
	pipe = l.o.Regional.TxPipeline()
	pipe.Set(ctx, l.keys.reported, now, 4*l.o.LeaseTTL)
	for i, r := range reports {
		if got[i].Grant.None() {
			pipe.HDel(ctx, l.keys.grants, r.Key)
			continue
		}
		pipe.HSet(ctx, l.keys.grants, r.Key, formatGrant(got[i].Grant, last[i]))
	}
	pipe.PExpire(ctx, l.keys.grants, 4*l.o.LeaseTTL)
	if _, err := pipe.Exec(ctx); err != nil {
		l.o.Logger.Warn("regions: writing the grants failed", slog.String("error", err.Error()))
	}
}
