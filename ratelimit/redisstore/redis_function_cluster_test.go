package redisstore_test

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/redisstore"
	"github.com/quotagate/quotagate/ratelimit/storetest"
)

// TestRedisStoreMixedClusterFunctionMode: on a Cluster half-way through an
// upgrade, one primary refuses functions (here its ACL lacks +fcall and
// +function, as a Redis 6 node lacks the commands) while the other runs
// them. Each primary keeps its own mode, minute after minute: the one
// that runs functions gets only FCALLs, the one that refuses them gets
// EVALSHA and one try of FCALL per minute, and the log says so once,
// naming the node, instead of flapping between "unavailable" and
// "available again" every minute.
func TestRedisStoreMixedClusterFunctionMode(t *testing.T) {
	c := redistest.StartCluster(t, 2)
	old, upgraded := c.Nodes()[0], c.Nodes()[1]
	old.MustDo(t, "ACL", "SETUSER", "default", "-fcall", "-function")
	prefix := redistest.KeyPrefix(t)
	keyOn := func(srv *redistest.Server) string {
		for i := 0; ; i++ {
			if k := fmt.Sprintf("%s{mixed%d}k", prefix, i); c.PrimaryForKey(k) == srv {
				return k
			}
		}
	}
	oldKey, newKey := keyOn(old), keyOn(upgraded)
	for _, disabled := range []bool{false, true} {
		t.Run(fmt.Sprintf("uncoalesced=%v", disabled), func(t *testing.T) {
			fcall0, evalsha0 := scriptCallsByKind(t, upgraded)
			refused0 := noperms(t, old)
			var logs syncBuffer
			s := redisstore.NewRedisStore(redisstore.NewRedisClient(redisstore.RedisClientOptions{Addrs: c.Addrs()}),
				redisstore.RedisOptions{Timeout: 10 * time.Second, Coalesce: redisstore.CoalesceOptions{Disabled: disabled},
					Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			defer s.Close()
			clock := storetest.NewClock(time.Unix(1_700_000_000, 0))
			redisstore.SetModeClock(s, clock.Now)
			decide := func(key string, round int) {
				t.Helper()
				it := tb(key, 1, 1000, time.Hour, 1)
				if d, err := s.Decide(context.Background(), []ratelimit.Item{it}); err != nil || !d.Allowed {
					t.Fatalf("round %d, %s: %+v, %v", round, key, d, err)
				}
			}
			const rounds = 4
			decisions := 0
			for round := range rounds {
				// Both orders: a try of FCALL that lands on the upgraded
				// node first must not bring FCALL back for the old one.
				if round%2 == 0 {
					decide(newKey, round)
					decide(oldKey, round)
				} else {
					decide(oldKey, round)
					decide(newKey, round)
				}
				decide(newKey, round)
				decide(oldKey, round)
				decisions += 2
				// Both decisions in one Decide: on the uncoalesced path
				// they share a pipeline across the two nodes.
				both := []ratelimit.Item{tb(oldKey, 1, 1000, time.Hour, 1), tb(newKey, 1, 1000, time.Hour, 1)}
				if d, err := s.Decide(context.Background(), both); err != nil || !d.Allowed {
					t.Fatalf("round %d, both: %+v, %v", round, d, err)
				}
				decisions++
				clock.Add(redisstore.ReprobeEvery)
			}
			fcall, evalsha := scriptCallsByKind(t, upgraded)
			if evalsha != evalsha0 || fcall-fcall0 < int64(decisions) {
				t.Errorf("the upgraded node ran %d FCALL and %d EVALSHA/EVAL for %d decisions, want FCALL only",
					fcall-fcall0, evalsha-evalsha0, decisions)
			}
			// The first decision and one try per minute after it.
			if refused := noperms(t, old) - refused0; refused != rounds {
				t.Errorf("the old node refused %d FCALLs over %d minutes, want %d (one try a minute)", refused, rounds, rounds)
			}
			out := logs.String()
			if n := strings.Count(out, "level=WARN"); n != 1 || !strings.Contains(out, "node="+old.Addr) {
				t.Errorf("log %q: want one warn line naming %s", out, old.Addr)
			}
			if strings.Contains(out, "available again") {
				t.Errorf("log %q: the mode flapped", out)
			}
		})
	}
}

// noperms returns the NOPERM errors srv has replied (INFO errorstats).
func noperms(t testing.TB, srv *redistest.Server) int {
	t.Helper()
	info, _ := srv.MustDo(t, "INFO", "errorstats").(string)
	m := regexp.MustCompile(`errorstat_NOPERM:count=(\d+)`).FindStringSubmatch(info)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}
