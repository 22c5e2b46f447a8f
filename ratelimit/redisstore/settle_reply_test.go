package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/redisstore"
)

// TestSettleRefusesUnexpectedReplies points a real store at a server that
// answers the settlement's script call with well-formed RESP of the wrong
// shape. Settle must report ErrUnavailable (the caller may try again with
// the same id) and never that the settlement was applied, and its error
// must describe the reply by shape, not print it.
func TestSettleRefusesUnexpectedReplies(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	for name, payload := range map[string]string{
		"integer, not an array": ":1\r\n",
		"two elements":          "*2\r\n:1\r\n:1\r\n",
		"empty array":           "*0\r\n",
		"flag 2":                "*1\r\n:2\r\n",
		"flag -1":               "*1\r\n:-1\r\n",
		"string flag":           "*1\r\n$1\r\n1\r\n",
		"nil flag":              "*1\r\n$-1\r\n",
		"nested array":          "*1\r\n*1\r\n:1\r\n",
		"status reply":          "+OK\r\n",
		"megabyte flag":         "*1\r\n$" + "1048576" + "\r\n" + big + "\r\n",
		"megabyte string":       "$1048576\r\n" + big + "\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			h := redistest.StartHostile(t, []byte(payload), "EVALSHA", "EVAL", "FCALL")
			client := redisstore.NewRedisClient(redisstore.RedisClientOptions{Addrs: []string{h.Addr}, ReadTimeout: 5 * time.Second})
			s := redisstore.NewRedisStore(client, redisstore.RedisOptions{Timeout: 5 * time.Second})
			defer s.Close()
			st := ratelimit.Settlement{Item: tb("{settle}k", 10, 10, time.Second, 1), Delta: -1}
			applied, err := s.Settle(context.Background(), "id-1", []ratelimit.Settlement{st})
			if h.Answered.Load() == 0 {
				t.Fatalf("the server never sent its reply (Settle = %v, %v)", applied, err)
			}
			if applied {
				t.Errorf("Settle reported the settlement applied on reply %.40q", payload)
			}
			if !errors.Is(err, ratelimit.ErrUnavailable) {
				t.Fatalf("Settle = %v, want ErrUnavailable", err)
			}
			if len(err.Error()) > 200 {
				t.Errorf("error of %d bytes, want the reply described by its shape: %.200s", len(err.Error()), err.Error())
			}
		})
	}
}
