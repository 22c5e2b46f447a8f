package redisstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/internal/redistest"
)

// replyError is an error reply as go-redis returns it: a redis.Error.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

// TestFunctionRefusalErrors: only the errors that say the server has no
// functions or will not let this user run them are refusals (which make
// the store fall back to EVALSHA); a busy, loading, read-only, full or
// failing server, a dropped connection or a timeout is not. The replies
// are those of redis-server 7.0 and 7.2 and, for the unknown commands,
// of Redis 6.2, as they send them. (fcallRefused reads only the errors
// of FCALL, and loadRefused those of FUNCTION LOAD: an unknown command is
// the command sent.)
func TestFunctionRefusalErrors(t *testing.T) {
	for _, c := range []struct {
		err         error
		load, fcall bool
	}{
		// No functions at all: Redis 6, a rename-command, a managed Redis.
		{replyError("ERR unknown command 'FCALL', with args beginning with: 'quotagate_0123456789ab' '1' '{k}a' "), true, true},
		{replyError("ERR unknown command `fcall`, with args beginning with: `quotagate_0123456789ab`, `1`, `{k}a`, "), true, true},
		{replyError("ERR unknown command 'FUNCTION', with args beginning with: 'LOAD' '#!lua name=quotagate_0123456789ab' "), true, true},
		{replyError("ERR unknown subcommand 'LOAD'. Try FUNCTION HELP."), true, false},
		{replyError("ERR Engine 'LUA' not found"), true, false},
		// An ACL that refuses them (7.0, then 7.2 wording).
		{replyError("NOPERM this user has no permissions to run the 'fcall' command"), true, true},
		{replyError("NOPERM User gw has no permissions to run the 'fcall' command"), true, true},
		{replyError("NOPERM this user has no permissions to run the 'function|load' command"), true, false},
		{replyError("NOPERM User gw has no permissions to run the 'function|load' command"), true, false},
		// An ACL that refuses the keys refuses EVALSHA as well.
		{replyError("NOPERM this user has no permissions to access one of the keys used as arguments"), true, false},
		// The function is missing: load it, nothing is refused.
		{replyError("ERR Function not found"), false, false},
		// Passing states of the server.
		{replyError("LOADING Redis is loading the dataset in memory"), false, false},
		{replyError("BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."), false, false},
		{replyError("MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk. Commands that may modify the data set are disabled, because this instance is configured to report errors during writes if RDB snapshotting fails (stop-writes-on-bgsave-error option). Please check the Redis logs for details about the RDB error."), false, false},
		{replyError("READONLY You can't write against a read only replica."), false, false},
		{replyError("OOM command not allowed when used memory > 'maxmemory'."), false, false},
		{replyError("NOREPLICAS Not enough good replicas to write."), false, false},
		{replyError("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."), false, false},
		{replyError("CLUSTERDOWN The cluster is down"), false, false},
		{replyError("TRYAGAIN Multiple keys request during rehashing of slot"), false, false},
		{replyError("MOVED 3999 127.0.0.1:6381"), false, false},
		{replyError("ERR max number of clients reached"), false, false},
		{replyError("NOAUTH Authentication required."), false, false},
		{replyError("WRONGPASS invalid username-password pair or user is disabled."), false, false},
		{replyError("ERR Error compiling function: user_function:2: '=' expected near 'error'"), false, false},
		// Not replies at all.
		{context.DeadlineExceeded, false, false},
		{&net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}, false, false},
		{io.EOF, false, false},
		{errors.New("unknown command"), false, false},
		{fmt.Errorf("%w: %w", errNoReply, io.ErrUnexpectedEOF), false, false},
	} {
		if got := loadRefused(c.err); got != c.load {
			t.Errorf("loadRefused(%q) = %v, want %v", c.err, got, c.load)
		}
		if got := fcallRefused(c.err); got != c.fcall {
			t.Errorf("fcallRefused(%q) = %v, want %v", c.err, got, c.fcall)
		}
	}
}

// TestFunctionRefusalErrorsLive provokes each kind of error from a real
// redis-server, as go-redis returns it, and checks how it is read: a
// server without FCALL and FUNCTION (renamed away, as on a managed Redis)
// and ACL users without them refuse; a server that is full, read-only,
// short of replicas, failing to persist or busy with a script does not.
func TestFunctionRefusalErrorsLive(t *testing.T) {
	ctx := context.Background()
	fcall := func(c redis.Cmdable) error { return c.FCall(ctx, "quotagate_probe", []string{"{p}k"}).Err() }
	load := func(c redis.Cmdable) error { return loadLibrary(ctx, c) }
	check := func(t *testing.T, what string, err error, f func(error) bool, want bool) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s: no error", what)
		}
		if got := f(err); got != want {
			t.Errorf("%s: %q read as refused=%v, want %v", what, err, got, want)
		}
	}

	t.Run("renamed", func(t *testing.T) {
		srv := redistest.StartStandaloneWith(t, redistest.Options{Args: []string{
			"--rename-command", "FCALL", "", "--rename-command", "FUNCTION", ""}})
		c := redis.NewClient(&redis.Options{Addr: srv.Addr})
		defer c.Close()
		check(t, "FCALL", fcall(c), fcallRefused, true)
		check(t, "FUNCTION LOAD", load(c), loadRefused, true)
	})

	srv := redistest.StartStandalone(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer admin.Close()
	if err := admin.FunctionLoad(ctx, "#!lua name=quotagate_probe\nredis.register_function('quotagate_probe', function(k) return redis.call('INCR', k[1]) end)\n").Err(); err != nil {
		t.Fatal(err)
	}
	t.Run("acl", func(t *testing.T) {
		user := func(name string, rules ...string) *redis.Client {
			srv.MustDo(t, append([]string{"ACL", "SETUSER", name, "on", ">pw", "&*", "+@all"}, rules...)...)
			c := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: name, Password: "pw"})
			t.Cleanup(func() { _ = c.Close() })
			return c
		}
		check(t, "FCALL without +fcall", fcall(user("nofcall", "~*", "-fcall")), fcallRefused, true)
		check(t, "FUNCTION LOAD without +function|load", load(user("noload", "~*", "-function|load")), loadRefused, true)
		check(t, "FUNCTION LOAD without +function", load(user("nofunction", "~*", "-function")), loadRefused, true)
		check(t, "FCALL on keys the user may not touch", fcall(user("nokeys", "~other*")), fcallRefused, false)
	})

	// Each state is set up, checked, and undone before the next.
	for _, c := range []struct {
		name     string
		set, off [][]string
	}{
		{"oom", [][]string{{"CONFIG", "SET", "maxmemory", "1"}}, [][]string{{"CONFIG", "SET", "maxmemory", "0"}}},
		{"noreplicas", [][]string{{"CONFIG", "SET", "min-replicas-to-write", "1"}}, [][]string{{"CONFIG", "SET", "min-replicas-to-write", "0"}}},
		{"readonly", [][]string{{"REPLICAOF", "127.0.0.1", "1"}}, [][]string{{"REPLICAOF", "NO", "ONE"}}},
		{"misconf", nil, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.name == "misconf" {
				defer srv.FailPersistence(t)()
			}
			for _, cmd := range c.set {
				srv.MustDo(t, cmd...)
			}
			defer func() {
				for _, cmd := range c.off {
					srv.MustDo(t, cmd...)
				}
			}()
			check(t, "FUNCTION LOAD", load(admin), loadRefused, false)
			check(t, "FCALL", fcall(admin), fcallRefused, false)
		})
	}

	t.Run("busy", func(t *testing.T) {
		srv.MustDo(t, "CONFIG", "SET", "busy-reply-threshold", "10")
		defer srv.MustDo(t, "CONFIG", "SET", "busy-reply-threshold", "5000")
		looping := make(chan error, 1)
		go func() { looping <- admin.Eval(ctx, "while true do end", nil).Err() }()
		defer func() {
			// SCRIPT KILL fails with NOTBUSY until the loop has started.
			for {
				if _, err := srv.Do("SCRIPT", "KILL"); err == nil || !strings.Contains(err.Error(), "NOTBUSY") {
					break
				}
			}
			<-looping
		}()
		c := redis.NewClient(&redis.Options{Addr: srv.Addr})
		defer c.Close()
		var err error
		for err == nil || !strings.HasPrefix(err.Error(), "BUSY") {
			if err = load(c); err != nil && !strings.HasPrefix(err.Error(), "BUSY") {
				t.Fatalf("FUNCTION LOAD before the script ran: %v", err)
			}
			_ = c.FunctionDelete(ctx, libraryName)
		}
		check(t, "FUNCTION LOAD", err, loadRefused, false)
		check(t, "FCALL", fcall(c), fcallRefused, false)
	})
}
