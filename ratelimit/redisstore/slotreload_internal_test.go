package redisstore

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestUnreplied: the slot map is read again for a pipeline that failed
// without a reply (its own error, or a command's), never for one whose
// commands all got a reply, error replies included.
func TestUnreplied(t *testing.T) {
	cmd := func(err error) redis.Cmder {
		c := redis.NewCmd(context.Background())
		c.SetErr(err)
		return c
	}
	cases := []struct {
		name string
		err  error
		cmds []redis.Cmder
		want error
	}{
		{"all replied", nil, []redis.Cmder{cmd(nil), cmd(nil)}, nil},
		{"error reply", redis.Nil, []redis.Cmder{cmd(nil), cmd(redis.Nil)}, nil},
		{"pipeline failed", io.EOF, []redis.Cmder{cmd(io.EOF)}, io.EOF},
		{"a command unanswered after a reply", redis.Nil, []redis.Cmder{cmd(redis.Nil), cmd(io.ErrUnexpectedEOF)}, io.ErrUnexpectedEOF},
		{"no commands", nil, nil, nil},
	}
	for _, c := range cases {
		if got := unreplied(c.err, c.cmds); !errors.Is(got, c.want) || (c.want == nil) != (got == nil) {
			t.Errorf("%s: unreplied = %v, want %v", c.name, got, c.want)
		}
	}
}
