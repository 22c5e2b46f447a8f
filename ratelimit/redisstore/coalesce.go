package redisstore

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// CoalesceOptions configures how a RedisStore sends its script calls.
//
// With coalescing on (the default), a Decide's script call joins a queue,
// and up to Writers callers at a time act as writers: a writer takes every
// call queued at that moment (up to MaxBatch, its own among them) and sends
// them as one pipeline: one write and one read on one connection per Redis
// node, however many decisions are in it. A caller whose call is still
// queued when a writer slot frees becomes the next writer. Nobody ever
// waits for a batch to fill: at low load a caller finds a free slot and
// sends its lone call at once, from its own goroutine, so coalescing adds
// no hand-off and no latency. Under load the queue fills while the
// pipelines in flight are answered, and the next pipelines carry all of
// it, so throughput is bounded by Redis executing the scripts rather than
// by round trips.
//
// A writer's pipeline runs until the writer's own deadline (the latest of
// the batch's deadlines when the writer has none), so no caller is kept
// past its deadline; calls of the batch with later deadlines then fail
// early, as they would on a store that slow.
//
// With a Cluster client a pipeline is split by node (go-redis groups its
// commands by slot owner and sends to the nodes in parallel), so a batch
// costs one round trip per node it touches.
type CoalesceOptions struct {
	// Disabled sends each Decide's script calls from the calling goroutine
	// alone, one round trip per call (the calls that follow a denial still
	// share one pipeline). It exists for comparison.
	Disabled bool
	// Writers is the most pipelines in flight at once. 0 or less means 2:
	// one pipeline is being answered while the next one fills, and more
	// would only make batches smaller (on a host shared with Redis they
	// also take CPU from it). It should not exceed the client's pool size.
	Writers int
	// MaxBatch bounds the calls of one pipeline. 0 or less means 256.
	MaxBatch int
}

const (
	defaultWriters  = 2
	defaultMaxBatch = 256
	// queueDepth is the number of calls that may be queued before callers
	// block (each still bounded by its own deadline).
	queueDepth = 4096
)

// errStoreClosed is the cause of a call made on a closed store.
var errStoreClosed = errors.New("store closed")

// The states of a scriptCall. A call moves from queued to sent (a writer
// took it) or to abandoned (its caller stopped waiting first), never back.
const (
	callQueued int32 = iota
	callSent
	callAbandoned
)

// scriptCall is one script call (one hash-tag group) waiting for its reply.
//
// Calls are reused (see callPool): a call goes back to the pool it came
// from only once its caller has received the reply. A call its caller
// abandoned is left to the writer that may still hold it and is never
// reused.
type scriptCall struct {
	b     bound
	state atomic.Int32
	// done receives one value once val and err are set (it is buffered, so
	// the writer never blocks, and drained by the caller before reuse).
	done chan struct{}
	val  any
	err  error
	// timer fires at b.at while the caller waits, when b.own; armed says it
	// is running. Only the caller touches them.
	timer *time.Timer
	armed bool

	// The EVALSHA arguments (see build; cmd makes them an FCALL) and the
	// keys among them.
	args []any
	keys []string
	// specs are the spec texts of the items of the last command built, by
	// position (see specText).
	specs []specMemo
	// pctx is the context of the pipelines this call writes as owner;
	// batch and cmds are their calls and commands, kept for the next
	// pipeline this call writes (emptied after each, so that they hold no
	// other call or reply).
	pctx  pipeCtx
	batch []*scriptCall
	cmds  []*redis.Cmd

	// pool is the pool the call goes back to.
	pool *callPool
}

// callPool holds the unused calls of one RedisStore. A call never passes
// from one store to another, so the channel and timers it holds stay with
// the store that made them (a store made in a testing/synctest bubble
// keeps its calls in it, and no call made outside enters it). The zero
// value is empty and ready for use.
type callPool struct{ p sync.Pool }

// get returns an unused call that will run under b.
func (p *callPool) get(b bound) *scriptCall {
	c, _ := p.p.Get().(*scriptCall)
	if c == nil {
		c = &scriptCall{done: make(chan struct{}, 1), pool: p}
	}
	c.b = b
	c.state.Store(callQueued)
	return c
}

// putCall returns c, whose reply its caller has taken (or which was never
// sent), to its pool.
func putCall(c *scriptCall) {
	c.disarm()
	c.b, c.val, c.err = bound{}, nil, nil
	c.pool.p.Put(c)
}

// finish returns the reply of a call whose done has been received, and
// releases the call.
func (c *scriptCall) finish() (any, error) {
	v, err := c.val, c.err
	putCall(c)
	return v, err
}

// deadline returns a channel that fires at the call's own deadline (nil
// when ctx's end is the deadline), starting the timer on first use.
func (c *scriptCall) deadline() <-chan time.Time {
	if !c.b.own {
		return nil
	}
	if !c.armed {
		d := time.Until(c.b.at)
		if c.timer == nil {
			c.timer = time.NewTimer(d)
		} else {
			c.timer.Reset(d)
		}
		c.armed = true
	}
	return c.timer.C
}

// disarm stops the deadline timer (after which it delivers nothing).
func (c *scriptCall) disarm() {
	if c.armed {
		c.timer.Stop()
		c.armed = false
	}
}

// abandon marks the call as left by its caller if it is still queued, so
// that no writer sends it.
func (c *scriptCall) abandon() bool {
	c.disarm()
	return c.state.CompareAndSwap(callQueued, callAbandoned)
}

// cmd returns the call's command, FCALL of the library's function when fn
// is set, otherwise EVALSHA, with arguments of its own (a hook may keep
// them after the call is reused).
func (c *scriptCall) cmd(ctx context.Context, fn bool) *redis.Cmd {
	args := slices.Clone(c.args)
	if fn {
		args[0], args[1] = "fcall", libraryFunc
	}
	cmd := redis.NewCmd(ctx, args...)
	cmd.SetFirstKeyPos(3) // as go-redis's own EvalSha and FCall do, for Cluster routing
	return cmd
}

// coalescer is the queue and writer slots of one RedisStore. It starts no
// goroutine: callers do the writing.
type coalescer struct {
	run *runner
	// mode is the function mode of the server the queue's calls go to
	// (on a Cluster, its primary's).
	mode     *fnMode
	maxBatch int
	queue    chan *scriptCall
	slots    chan struct{} // holds one token per writer at work
	// quit ends the queue when closed; stop closes it once. On a Cluster
	// every node's queue shares the store's (see RedisStore.nodeQuit).
	quit chan struct{}
	stop *sync.Once
}

func newCoalescer(run *runner, mode *fnMode, o CoalesceOptions) *coalescer {
	writers, maxBatch := o.Writers, o.MaxBatch
	if writers <= 0 {
		writers = defaultWriters
	}
	if maxBatch <= 0 {
		maxBatch = defaultMaxBatch
	}
	return &coalescer{
		run:      run,
		mode:     mode,
		maxBatch: maxBatch,
		queue:    make(chan *scriptCall, queueDepth),
		slots:    make(chan struct{}, writers),
		quit:     make(chan struct{}),
		stop:     new(sync.Once),
	}
}

// close makes queued and future calls fail. Pipelines in flight finish.
func (c *coalescer) close() { c.stop.Do(func() { close(c.quit) }) }

// enqueue adds call to the queue. It fails when the call's ctx or
// deadline ends first or the store is closed; the call was then never
// sent (and the caller may release it). It is for callers that queue
// several calls before waiting for any (exchange); a lone call goes
// through do.
func (c *coalescer) enqueue(call *scriptCall) error {
	select {
	case <-c.quit:
		return errStoreClosed
	default:
	}
	select {
	case c.queue <- call:
		return nil
	default:
	}
	select {
	case c.queue <- call:
		return nil
	case <-call.b.ctx.Done():
		return call.b.ctx.Err()
	case <-call.deadline():
		return context.DeadlineExceeded
	case <-c.quit:
		return errStoreClosed
	}
}

// do sends call, which nobody else has seen, and returns its reply: wait
// for a call that was never queued. A caller that finds a writer slot free
// sends its own call at once, with whatever else is queued, without
// putting it through the queue.
func (c *coalescer) do(call *scriptCall) (any, error) {
	return c.await(call, false)
}

// wait returns the reply of an enqueued call; see await.
func (c *coalescer) wait(call *scriptCall) (any, error) {
	return c.await(call, true)
}

// await returns the reply of call, queued or not yet (queued false: it is
// queued only when no writer slot is free). While the call is unsent the
// caller writes pipelines itself whenever a writer slot is free, its own
// call first. If the call's ctx or deadline ends first, or the store is
// closed while the call is unsent, it returns that error
// (context.DeadlineExceeded at the deadline, errStoreClosed): a call not
// yet sent is then never sent, and one already sent is left to finish
// unobserved (whether it consumed is unknown; it is never sent again). The
// caller must not touch call after await.
//
// One loop serves every state: the cases that cannot apply are nil
// channels. The first pass of each turn does not block, so at low load,
// or when the reply is already there, no timer is armed.
func (c *coalescer) await(call *scriptCall, queued bool) (any, error) {
	quit := c.quit
	if !queued {
		select {
		case <-quit:
			putCall(call)
			return nil, errStoreClosed
		default:
		}
	}
	for {
		var slots chan struct{}
		var queue chan *scriptCall
		if call.state.Load() == callQueued {
			slots = c.slots
			if !queued {
				queue = c.queue
			}
		}
		// The non-blocking tries are single-case selects, which cost
		// far less than a select over all the cases below.
		if slots != nil {
			select {
			case slots <- struct{}{}:
				c.write(call, !queued)
				<-c.slots
				continue
			default:
			}
		}
		select {
		case <-call.done:
			return call.finish()
		default:
		}
		if queue != nil {
			select {
			case queue <- call:
				queued = true
				continue
			default:
			}
		}
		select {
		case slots <- struct{}{}:
			c.write(call, !queued)
			<-c.slots
		case queue <- call:
			queued = true
		case <-call.done:
			return call.finish()
		case <-call.b.ctx.Done():
			return nil, c.leave(call, queued, call.b.ctx.Err())
		case <-call.deadline():
			return nil, c.leave(call, queued, context.DeadlineExceeded)
		case <-quit:
			if slots != nil && call.abandon() {
				if !queued {
					putCall(call)
				}
				return nil, errStoreClosed
			}
			// Sent: its reply (or its deadline) comes.
			quit = nil
		}
	}
}

// leave gives up on call with err. An unsent call is marked abandoned so
// that no writer sends it; one never queued is then released, one queued
// is left to the writer that may still hold it (as is a sent one).
func (c *coalescer) leave(call *scriptCall, queued bool, err error) error {
	if call.abandon() && !queued {
		putCall(call)
	}
	return err
}

// write sends what is queued now (up to maxBatch calls), after owner when
// withOwner (owner is not in the queue), as one pipeline bounded by the
// deadline of owner, the writer's own call.
func (c *coalescer) write(owner *scriptCall, withOwner bool) {
	batch := owner.batch[:0]
	if withOwner {
		batch = append(batch, owner)
	}
	for len(batch) < c.maxBatch {
		select {
		case call := <-c.queue:
			batch = append(batch, call)
			continue
		default:
		}
		break
	}
	sendPipeline(owner, c.run, c.mode, batch, true)
	clear(batch)
	owner.batch = batch[:0]
}

// sendPipeline sends calls as one pipeline of script calls (FCALL, or
// EVALSHA once m, the mode of the server they go to, has fallen back to
// it), sets each call's reply and
// signals its done. When claim is set, calls whose caller has already
// stopped waiting are skipped (never sent), and the others are marked
// sent; calls is then the writer's own slice, which it filters.
//
// The pipeline runs until owner's deadline or, when owner has none, the
// latest deadline among the calls (none if one of them has none: the
// client's socket timeouts then bound it).
//
// Calls that did not run because the server lacks the function library or
// cannot run it are sent again (see runner.recoverFunction), and so are
// calls that fail with NOSCRIPT (see recoverScript).
func sendPipeline(owner *scriptCall, r *runner, m *fnMode, calls []*scriptCall, claim bool) {
	live := calls
	if claim {
		live = calls[:0]
		for _, call := range calls {
			if call.state.CompareAndSwap(callQueued, callSent) {
				live = append(live, call)
			}
		}
	}
	if len(live) == 0 {
		return
	}
	ctx := batchContext(owner, live)
	if ctx == &owner.pctx {
		defer owner.pctx.stop()
	}
	fn, probe := r.useFunction(m)
	cmds := resize(owner.cmds, len(live))
	defer func() {
		clear(cmds)
		owner.cmds = cmds[:0]
	}()
	pipe := r.pipeline()
	for i, call := range live {
		cmds[i] = call.cmd(ctx, fn)
		_ = pipe.Process(ctx, cmds[i])
	}
	_, err := pipe.Exec(ctx)
	r.pipes.Put(pipe)
	stampUnanswered(cmds, err)
	if fn {
		r.recoverFunction(ctx, m, live, cmds, probe)
	}
	recoverScript(ctx, r.client, live, cmds)
	for i, call := range live {
		call.val, call.err = cmds[i].Result()
		call.done <- struct{}{}
	}
}

// recoverScript sends again the EVALSHAs of cmds that failed with
// NOSCRIPT (the server lost its script cache: nothing ran), after loading
// the script once (on every node of a cluster), and any that still fail
// that way with EVAL and the source, which caches it again.
func recoverScript(ctx context.Context, client redis.UniversalClient, live []*scriptCall, cmds []*redis.Cmd) {
	var again []int
	for i, cmd := range cmds {
		if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			again = append(again, i)
		}
	}
	if len(again) == 0 {
		return
	}
	if decideScript.Load(ctx, client).Err() == nil {
		pipe := client.Pipeline()
		for _, i := range again {
			cmds[i] = live[i].cmd(ctx, false)
			_ = pipe.Process(ctx, cmds[i])
		}
		_, err := pipe.Exec(ctx)
		stampUnanswered(cmds, err)
	}
	for _, i := range again {
		if redis.HasErrorPrefix(cmds[i].Err(), "NOSCRIPT") {
			cmds[i] = decideScript.Eval(ctx, client, live[i].keys, live[i].argv()...)
		}
	}
}

// errNoReply is the cause of a pipelined command that ended with neither
// a reply nor an error of its own.
var errNoReply = errors.New("redis: no reply and no error for a pipelined command")

// stampUnanswered gives execErr, the error of the pipeline that sent cmds,
// to every command left with neither a reply nor an error. go-redis leaves
// them so when the pipeline fails before sending, with an error reply to
// the connection's set-up (a wrong password's WRONGPASS): without this the
// caller would see a nil reply instead of the reason.
func stampUnanswered(cmds []*redis.Cmd, execErr error) {
	if execErr == nil {
		execErr = errNoReply
	}
	for _, cmd := range cmds {
		if cmd.Err() == nil && cmd.Val() == nil {
			cmd.SetErr(execErr)
		}
	}
}

// batchContext returns a context that ends at owner's deadline, or if it
// has none at the latest deadline of calls, or never if one of them has
// none. It carries no values and no cancellation of the callers: a caller
// that leaves does not cut the pipeline that also carries other callers'
// decisions. With a deadline it is owner's pipeCtx, started, which the
// caller must stop once the pipeline is done.
func batchContext(owner *scriptCall, calls []*scriptCall) context.Context {
	at := owner.b.at
	if at.IsZero() {
		for _, call := range calls {
			if call.b.at.IsZero() {
				return context.Background()
			}
			if call.b.at.After(at) {
				at = call.b.at
			}
		}
	}
	owner.pctx.start(at)
	return &owner.pctx
}
