package redisstore

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/ratelimit"
)

// TestMergedCallRefusesUnexpectedReplies points a store that merges at a
// server that answers the merged script call of two decisions with
// well-formed RESP of the wrong shape (see splitMerged): each decision
// must fail with an error wrapping ErrUnavailable that describes the
// reply by its shape, never take another decision's values or panic.
func TestMergedCallRefusesUnexpectedReplies(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	for name, payload := range map[string]string{
		"integer, not an array":   ":1\r\n",
		"status reply":            "+OK\r\n",
		"megabyte string":         "$1048576\r\n" + big + "\r\n",
		"empty array":             "*0\r\n",
		"one decision's reply":    "*1\r\n:0\r\n",
		"length past the end":     "*1\r\n:1\r\n",
		"-1 without its error":    "*3\r\n:-1\r\n:7\r\n:0\r\n",
		"-1 at the end":           "*2\r\n:0\r\n:-1\r\n",
		"negative length":         "*3\r\n:-2\r\n:0\r\n:0\r\n",
		"huge length":             "*2\r\n:9223372036854775807\r\n:0\r\n",
		"string length":           "*2\r\n$1\r\n0\r\n:0\r\n",
		"nil length":              "*2\r\n$-1\r\n:0\r\n",
		"array as length":         "*2\r\n*0\r\n:0\r\n",
		"values left over":        "*3\r\n:0\r\n:0\r\n:0\r\n",
		"error where a length is": "*2\r\n-ERR x\r\n:0\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			h := redistest.StartHostile(t, []byte(payload), "EVALSHA", "EVAL", "FCALL")
			s := NewRedisStore(NewRedisClient(RedisClientOptions{Addrs: []string{h.Addr}, ReadTimeout: 5 * time.Second}), RedisOptions{
				Coalesce: CoalesceOptions{Disabled: true, MaxMerge: 16}, Logger: slog.New(slog.DiscardHandler)})
			t.Cleanup(func() { _ = s.Close() })
			s.run.pinEvalsha()
			bucket := []ratelimit.Item{{Key: "{a}k", Algorithm: ratelimit.TokenBucket, Limit: ratelimit.Limit{Rate: 1, Per: time.Hour, Burst: 2}, Cost: 1}}
			vals, errs := s.sendDecisions([]mergeDecision{
				{items: bucket, mode: modeDecide, merge: true},
				{items: bucket, mode: modeDecideShort, merge: true},
			}, 0)
			if h.Answered.Load() == 0 {
				t.Fatalf("the server never sent its reply (%v, %v)", vals, errs)
			}
			for k, err := range errs {
				if !errors.Is(err, ratelimit.ErrUnavailable) {
					t.Errorf("decision %d: %.100v, %v; want ErrUnavailable", k, vals[k], err)
					continue
				}
				if vals[k] != nil {
					t.Errorf("decision %d failed with a reply set: %.100v", k, vals[k])
				}
				if len(err.Error()) > 200 {
					t.Errorf("decision %d: error of %d bytes, want the reply described by its shape: %.200s", k, len(err.Error()), err.Error())
				}
			}
		})
	}
}
