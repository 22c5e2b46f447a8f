package redisstore

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// The decision script runs as a Redis function (Redis 7 and later): the
// library is loaded once per server (FUNCTION LOAD), which builds the
// algorithms' tables and closures once, and every call is an FCALL that
// runs only the entry point. Servers without functions, or clients whose
// ACL refuses them, run the same code as a script (EVALSHA), which builds
// everything on every call.
//
// The library and its one function are both named libraryName: quotagate_
// and the first 12 hex digits of the SHA-1 of the library's source (with
// the name left out). Gateways of different versions sharing a server each
// load and call their own library, so a rolling deploy never replaces code
// that the other version still calls; a library no gateway calls any more
// stays loaded until an operator deletes it (FUNCTION DELETE).
//
// The function is registered without flags, which is what a decision
// needs: it writes (so it is refused on replicas, and at maxmemory under
// noeviction, where a script would fail only at its first write), it may
// run in a Cluster (no no-cluster), its keys share one hash slot (no
// allow-cross-slot-keys), and it never runs on a stale replica (no
// allow-stale: decisions go to primaries). TIME is allowed: functions
// replicate their effects, not their code.
var libraryName, librarySource = assembleLibrary(assembleBody())

// libraryFunc is the FCALL function name, boxed once.
var libraryFunc any = libraryName

// assembleLibrary returns the library's name and source for body, which
// defines the entry point decide(KEYS, ARGV).
func assembleLibrary(body string) (name, src string) {
	text := func(name string) string {
		return "#!lua name=" + name + "\n" + body +
			"redis.register_function{function_name = '" + name + "', callback = decide}\n"
	}
	sum := sha1.Sum([]byte(text("quotagate")))
	name = "quotagate_" + hex.EncodeToString(sum[:])[:12]
	return name, text(name)
}

// runner sends the script calls of one client, as FCALL until the client
// meets a server that cannot run the library, then as EVALSHA for good.
type runner struct {
	client redis.UniversalClient
	log    *slog.Logger
	// evalsha is set once a server has no FUNCTION or FCALL command or
	// refused them (an ACL without +fcall or +function, a managed Redis):
	// from then on every call is an EVALSHA.
	evalsha atomic.Bool
	// announced is set once the mode in use has been logged.
	announced atomic.Bool
	// pipes holds pipelines of client for reuse: one that has run (Exec)
	// is empty again.
	pipes sync.Pool
}

// pipeline returns an empty pipeline of the client, to be put back in
// r.pipes after its Exec.
func (r *runner) pipeline() redis.Pipeliner {
	if p, ok := r.pipes.Get().(redis.Pipeliner); ok {
		return p
	}
	return r.client.Pipeline()
}

func newRunner(client redis.UniversalClient, log *slog.Logger) *runner {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &runner{client: client, log: log}
}

// recoverFunction handles the FCALLs of cmds (the calls live sent) that
// did not run: those whose function the server lacks (it restarted
// empty, FUNCTION FLUSH, a failover to a node without it) are sent again
// after the library is loaded on the node that owns their keys, and when
// the server has no functions or refuses them the runner falls back to
// EVALSHA and sends them again as EVALSHA. Nothing ran in either case, so
// nothing is done twice. A call whose function is missing again after the
// load (another FUNCTION FLUSH came between) is sent as EVAL with the
// script's source.
func (r *runner) recoverFunction(ctx context.Context, live []*scriptCall, cmds []*redis.Cmd) {
	var missing, refused []int
	for i, cmd := range cmds {
		switch err := cmd.Err(); {
		case err == nil:
			if !r.announced.Load() {
				r.announce()
			}
		case redis.HasErrorPrefix(err, "Function not found"):
			missing = append(missing, i)
		case fcallRefused(err):
			refused = append(refused, i)
		}
	}
	if len(missing) > 0 {
		switch err := r.load(ctx, live, missing); {
		case err == nil:
			r.resend(ctx, live, cmds, missing, true)
			// A FUNCTION FLUSH between the load and the call leaves the
			// function missing again: such a call runs as EVAL with the
			// source, which no flush can race, as NOSCRIPT's last resort
			// does.
			for _, i := range missing {
				if redis.HasErrorPrefix(cmds[i].Err(), "Function not found") {
					cmds[i] = decideScript.Eval(ctx, r.client, live[i].keys, live[i].argv()...)
				}
			}
		case loadRefused(err):
			r.fallBack(err)
			refused = append(refused, missing...)
		default:
			for _, i := range missing {
				cmds[i].SetErr(fmt.Errorf("loading function library %s: %w", libraryName, err))
			}
		}
	}
	if len(refused) > 0 {
		r.fallBack(cmds[refused[0]].Err())
		r.resend(ctx, live, cmds, refused, false)
	}
}

// fcallRefused reports whether err says that the server cannot or will
// not run FCALL at all (not an error of the call itself).
func fcallRefused(err error) bool {
	return redis.HasErrorPrefix(err, "unknown command") ||
		redis.HasErrorPrefix(err, "NOPERM") && strings.Contains(err.Error(), "'fcall'")
}

// loadRefused reports whether err, the error of FUNCTION LOAD, is the
// server's refusal (no such command, no permission, a managed Redis that
// forbids it) rather than a passing state such as a timeout, a loading or
// busy server, or a failover in progress.
func loadRefused(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	for _, p := range []string{"LOADING", "BUSY", "MASTERDOWN", "READONLY", "TRYAGAIN", "CLUSTERDOWN", "MOVED", "ASK", "OOM", "NOREPLICAS"} {
		if redis.HasErrorPrefix(err, p) {
			return false
		}
	}
	return true
}

// load loads the library on the nodes that own the keys of the calls
// idx: on a Cluster each such primary, otherwise the client's server. A
// library that is already there counts as loaded.
func (r *runner) load(ctx context.Context, live []*scriptCall, idx []int) error {
	cc, ok := r.client.(*redis.ClusterClient)
	if !ok {
		return loadLibrary(ctx, r.client)
	}
	done := map[string]bool{}
	for _, i := range idx {
		node, err := cc.MasterForKey(ctx, live[i].keys[0])
		if err != nil {
			return err
		}
		if addr := node.Options().Addr; !done[addr] {
			done[addr] = true
			if err := loadLibrary(ctx, node); err != nil {
				return err
			}
		}
	}
	return nil
}

func loadLibrary(ctx context.Context, c redis.Cmdable) error {
	err := c.FunctionLoad(ctx, librarySource).Err()
	if redis.HasErrorPrefix(err, "Library '") && strings.Contains(err.Error(), "already exists") {
		return nil // another gateway of this version loaded it first
	}
	return err
}

// resend sends the calls idx again, as FCALL when fn is set, otherwise as
// EVALSHA, and puts their new commands in cmds.
func (r *runner) resend(ctx context.Context, live []*scriptCall, cmds []*redis.Cmd, idx []int, fn bool) {
	pipe := r.client.Pipeline()
	again := make([]*redis.Cmd, len(idx))
	for k, i := range idx {
		cmds[i] = live[i].cmd(ctx, fn)
		again[k] = cmds[i]
		_ = pipe.Process(ctx, cmds[i])
	}
	_, err := pipe.Exec(ctx)
	stampUnanswered(again, err)
	if fn && !r.announced.Load() {
		for _, cmd := range again {
			if cmd.Err() == nil {
				r.announce()
				break
			}
		}
	}
}

// announce logs, once, that decisions run as the function library.
func (r *runner) announce() {
	if r.announced.CompareAndSwap(false, true) {
		r.log.Info("redis store: decisions run as a Redis function", slog.String("library", libraryName))
	}
}

// fallBack makes every later call an EVALSHA, logging why once.
func (r *runner) fallBack(cause error) {
	if r.evalsha.CompareAndSwap(false, true) {
		r.announced.Store(true)
		r.log.Warn("redis store: Redis functions unavailable, decisions run as EVALSHA scripts (each call rebuilds the script's tables: more Redis CPU per decision)",
			slog.String("library", libraryName), slog.String("cause", cause.Error()))
	}
}
