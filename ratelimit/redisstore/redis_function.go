package redisstore

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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

// reprobeEvery is how long a runner that fell back to EVALSHA sends
// EVALSHA before it tries FCALL again (see runner.useFunction): a server
// upgraded to functions, or an ACL that now grants them, gets them back
// within that time, at the cost of at most one pipeline per interval sent
// twice when the server still refuses.
const reprobeEvery = time.Minute

// runner sends the script calls of one client: as FCALL while a server
// runs the library, as EVALSHA after a server without functions (or an
// ACL that refuses them) turned it down, with one FCALL pipeline per
// reprobeEvery to see whether it still does. The mode is a server's (see
// fnMode): on a Cluster each primary has its own, so that during a rolling
// upgrade the primaries that run functions keep FCALL while those that do
// not yet run EVALSHA.
type runner struct {
	client redis.UniversalClient
	log    *slog.Logger
	// now is the clock of the fallback and the probes; time.Now but in
	// tests.
	now func() time.Time
	// one is the mode of a client of one server (standalone, Sentinel's
	// primary, a Ring) and of Cluster calls whose owner is unknown; nodes
	// maps a Cluster primary's address to its *fnMode.
	one     fnMode
	nodes   sync.Map
	cluster bool
	// startSince is the evalshaSince of every mode made: 0 (FCALL), but
	// in tests that pin EVALSHA (see pinEvalsha).
	startSince int64
	// pipes holds pipelines of client for reuse: one that has run (Exec)
	// is empty again.
	pipes sync.Pool
}

// fnMode is how calls are sent to one server: as FCALL, or as EVALSHA
// since a refusal (see runner.useFunction).
type fnMode struct {
	// node is the Cluster primary's address, "" for runner.one; the log
	// lines name it.
	node string
	// evalshaSince is 0 while calls are FCALLs. Once the server had no
	// FUNCTION or FCALL command or refused them (an ACL without +fcall or
	// +function, a managed Redis), it holds when (Unix ns, at least 1) the
	// runner fell back or last probed; see useFunction.
	evalshaSince atomic.Int64
	// announced is set once the mode in use has been logged.
	announced atomic.Bool
}

// modeFor returns the mode of the Cluster primary at addr, made on first
// use; runner.one for "" or a client of one server.
func (r *runner) modeFor(addr string) *fnMode {
	if addr == "" || !r.cluster {
		return &r.one
	}
	if m, ok := r.nodes.Load(addr); ok {
		return m.(*fnMode)
	}
	m := &fnMode{node: addr}
	m.evalshaSince.Store(r.startSince)
	got, _ := r.nodes.LoadOrStore(addr, m)
	return got.(*fnMode)
}

// logAttrs are the attributes of a mode's log lines: the library, and the
// node on a Cluster.
func (m *fnMode) logAttrs(extra ...slog.Attr) []any {
	out := []any{slog.String("library", libraryName)}
	if m.node != "" {
		out = append(out, slog.String("node", m.node))
	}
	for _, a := range extra {
		out = append(out, a)
	}
	return out
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
	r := &runner{client: client, log: log, now: time.Now}
	_, r.cluster = client.(*redis.ClusterClient)
	return r
}

// useFunction reports how to send the next pipeline to m's server: as
// FCALL (fn) or as EVALSHA. After a fallback it is EVALSHA, except for one pipeline once
// reprobeEvery has passed since the fallback or the last probe (or the
// clock went back), which is sent as FCALL with probe set: its success
// brings FCALL back for every call (see recoverFunction).
func (r *runner) useFunction(m *fnMode) (fn, probe bool) {
	since := m.evalshaSince.Load()
	if since == 0 {
		return true, false
	}
	now := unixStamp(r.now())
	if now >= since && now-since < int64(reprobeEvery) {
		return false, false
	}
	// One caller wins the probe of this interval; the others send EVALSHA.
	won := m.evalshaSince.CompareAndSwap(since, now)
	return won, won
}

// unixStamp is t in Unix ns, at least 1 (0 means "not fallen back").
func unixStamp(t time.Time) int64 { return max(t.UnixNano(), 1) }

// recoverFunction handles the FCALLs of cmds (the calls live sent) that
// did not run: those whose function the server lacks (it restarted
// empty, FUNCTION FLUSH, a failover to a node without it) are sent again
// after the library is loaded on the node that owns their keys, and when
// the server has no functions or refuses them m (the mode of the server
// they were sent to) falls back to EVALSHA and they are sent again as
// EVALSHA. Nothing ran in either case, so
// nothing is done twice. A call whose function is missing again after the
// load (another FUNCTION FLUSH came between) is sent as EVAL with the
// script's source. Any other failure, of a call or of the load (a timeout,
// a dropped connection, LOADING, READONLY...), is the calls' error, as
// for EVALSHA, and changes no mode. probe marks a pipeline sent as FCALL
// after a fallback (see useFunction): when one of its calls runs and none
// is refused, FCALL is back for m's server.
func (r *runner) recoverFunction(ctx context.Context, m *fnMode, live []*scriptCall, cmds []*redis.Cmd, probe bool) {
	var missing, refused []int
	var cause error // of the refusal
	ran := false
	for i, cmd := range cmds {
		switch err := cmd.Err(); {
		case err == nil:
			ran = true
		case redis.HasErrorPrefix(err, "Function not found"):
			missing = append(missing, i)
		case fcallRefused(err):
			refused = append(refused, i)
			cause = err
		}
	}
	if len(missing) > 0 {
		switch err := r.load(ctx, live, missing); {
		case err == nil:
			ran = r.resend(ctx, live, cmds, missing, true) || ran
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
			refused = append(refused, missing...)
			cause = err
		default:
			for _, i := range missing {
				cmds[i].SetErr(fmt.Errorf("loading function library %s: %w", libraryName, err))
			}
		}
	}
	if len(refused) > 0 {
		r.fallBack(m, cause)
		r.resend(ctx, live, cmds, refused, false)
		return
	}
	if ran {
		r.functionsRan(m, probe)
	}
}

// fcallRefused reports whether err, the error of an FCALL, says that the
// server cannot or will not run FCALL at all: it has no such command
// (Redis 6, a rename-command, a managed Redis that removed it) or the
// user may not run it (NOPERM naming 'fcall'; a NOPERM for the keys
// would refuse EVALSHA as well). Any other error is the call's own.
func fcallRefused(err error) bool {
	return redis.HasErrorPrefix(err, "unknown command") ||
		redis.HasErrorPrefix(err, "NOPERM") && strings.Contains(err.Error(), "'fcall'")
}

// loadRefused reports whether err, the error of FUNCTION LOAD, is the
// server's refusal to load functions: it has no such command or
// subcommand, no Lua engine for functions, or the user may not run it
// (NOPERM). Anything else (a timeout, a dropped connection, LOADING, BUSY,
// READONLY, OOM, MASTERDOWN, a failover in progress...) passes, and is no
// reason to give functions up.
func loadRefused(err error) bool {
	return redis.HasErrorPrefix(err, "unknown command") ||
		redis.HasErrorPrefix(err, "unknown subcommand") ||
		redis.HasErrorPrefix(err, "NOPERM") ||
		redis.HasErrorPrefix(err, "Engine ") && strings.HasSuffix(err.Error(), " not found")
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
// EVALSHA, puts their new commands in cmds and reports whether one of
// them ran.
func (r *runner) resend(ctx context.Context, live []*scriptCall, cmds []*redis.Cmd, idx []int, fn bool) bool {
	pipe := r.client.Pipeline()
	again := make([]*redis.Cmd, len(idx))
	for k, i := range idx {
		cmds[i] = live[i].cmd(ctx, fn)
		again[k] = cmds[i]
		_ = pipe.Process(ctx, cmds[i])
	}
	_, err := pipe.Exec(ctx)
	stampUnanswered(again, err)
	for _, cmd := range again {
		if cmd.Err() == nil {
			return true
		}
	}
	return false
}

// functionsRan is called when FCALLs ran on m's server: a probe's
// success brings FCALL back for it (logged at info), and the first success
// is logged once. A pipeline sent before a fallback and answered after it
// is no probe, and changes nothing.
func (r *runner) functionsRan(m *fnMode, probe bool) {
	if probe {
		if m.evalshaSince.Swap(0) != 0 {
			m.announced.Store(true)
			r.log.Info("redis store: Redis functions available again, decisions run as a Redis function", m.logAttrs()...)
		}
		return
	}
	if !m.announced.Load() && m.evalshaSince.Load() == 0 && m.announced.CompareAndSwap(false, true) {
		r.log.Info("redis store: decisions run as a Redis function", m.logAttrs()...)
	}
}

// fallBack makes later calls to m's server EVALSHAs (see useFunction),
// logging why when it was on FCALL.
func (r *runner) fallBack(m *fnMode, cause error) {
	if m.evalshaSince.Swap(unixStamp(r.now())) == 0 {
		m.announced.Store(true)
		r.log.Warn("redis store: Redis functions unavailable, decisions run as EVALSHA scripts (each call rebuilds the script's tables: more Redis CPU per decision); FCALL is tried again every minute",
			m.logAttrs(slog.String("cause", cause.Error()))...)
	}
}
