package ratelimit

import (
	"context"
	"errors"
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
type scriptCall struct {
	ctx   context.Context
	keys  []string
	args  []any
	state atomic.Int32
	done  chan struct{} // closed once val and err are set
	val   any
	err   error
}

func newScriptCall(ctx context.Context, keys []string, args []any) *scriptCall {
	return &scriptCall{ctx: ctx, keys: keys, args: args, done: make(chan struct{})}
}

// coalescer is the queue and writer slots of one RedisStore. It starts no
// goroutine: callers do the writing.
type coalescer struct {
	client   redis.UniversalClient
	maxBatch int
	queue    chan *scriptCall
	slots    chan struct{} // holds one token per writer at work
	quit     chan struct{}
	stop     sync.Once
}

func newCoalescer(client redis.UniversalClient, o CoalesceOptions) *coalescer {
	writers, maxBatch := o.Writers, o.MaxBatch
	if writers <= 0 {
		writers = defaultWriters
	}
	if maxBatch <= 0 {
		maxBatch = defaultMaxBatch
	}
	return &coalescer{
		client:   client,
		maxBatch: maxBatch,
		queue:    make(chan *scriptCall, queueDepth),
		slots:    make(chan struct{}, writers),
		quit:     make(chan struct{}),
	}
}

// close makes queued and future calls fail. Pipelines in flight finish.
func (c *coalescer) close() { c.stop.Do(func() { close(c.quit) }) }

// enqueue adds call to the queue. It fails when ctx ends first or the
// store is closed; the call was then never sent.
func (c *coalescer) enqueue(call *scriptCall) error {
	select {
	case <-c.quit:
		return errStoreClosed
	default:
	}
	select {
	case c.queue <- call:
		return nil
	case <-call.ctx.Done():
		return call.ctx.Err()
	case <-c.quit:
		return errStoreClosed
	}
}

// wait returns the reply of an enqueued call, writing pipelines itself
// whenever its call is still queued and a writer slot is free. If the
// call's context ends first it returns that context's error: a call not
// yet sent is then never sent, and one already sent is left to finish
// unobserved (whether it consumed is unknown; it is never sent again).
func (c *coalescer) wait(call *scriptCall) (any, error) {
	for call.state.Load() == callQueued {
		select {
		case c.slots <- struct{}{}:
			c.write(call.ctx)
			<-c.slots
		case <-call.done:
			return call.val, call.err
		case <-call.ctx.Done():
			call.state.CompareAndSwap(callQueued, callAbandoned)
			return nil, call.ctx.Err()
		case <-c.quit:
			if call.state.CompareAndSwap(callQueued, callAbandoned) {
				return nil, errStoreClosed
			}
		}
	}
	select {
	case <-call.done:
		return call.val, call.err
	case <-call.ctx.Done():
		return nil, call.ctx.Err()
	}
}

// write sends what is queued now (up to maxBatch calls) as one pipeline,
// bounded by the writer's ctx deadline.
func (c *coalescer) write(ctx context.Context) {
	batch := make([]*scriptCall, 0, 8)
	for len(batch) < c.maxBatch {
		select {
		case call := <-c.queue:
			batch = append(batch, call)
			continue
		default:
		}
		break
	}
	sendPipeline(ctx, c.client, batch, true)
}

// sendPipeline sends calls as one pipeline of EVALSHA and sets each call's
// reply. When claim is set, calls whose caller has already stopped waiting
// are skipped (never sent), and the others are marked sent.
//
// The pipeline runs until owner's deadline or, when owner has none, the
// latest deadline among the calls (none if one of them has none: the
// client's socket timeouts then bound it).
//
// Calls that fail with NOSCRIPT (the server lost its script cache: nothing
// ran) are sent again after loading the script once (on every node of a
// cluster), and any that still fail that way are sent with EVAL and the
// source, which caches it again.
func sendPipeline(owner context.Context, client redis.UniversalClient, calls []*scriptCall, claim bool) {
	live := calls
	if claim {
		live = make([]*scriptCall, 0, len(calls))
		for _, call := range calls {
			if call.state.CompareAndSwap(callQueued, callSent) {
				live = append(live, call)
			}
		}
	}
	if len(live) == 0 {
		return
	}
	ctx, cancel := batchContext(owner, live)
	defer cancel()
	cmds := make([]*redis.Cmd, len(live))
	pipe := client.Pipeline()
	for i, call := range live {
		cmds[i] = decideScript.EvalSha(ctx, pipe, call.keys, call.args...)
	}
	_, _ = pipe.Exec(ctx)

	var again []int
	for i, cmd := range cmds {
		if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		if decideScript.Load(ctx, client).Err() == nil {
			pipe := client.Pipeline()
			for _, i := range again {
				cmds[i] = decideScript.EvalSha(ctx, pipe, live[i].keys, live[i].args...)
			}
			_, _ = pipe.Exec(ctx)
		}
		for _, i := range again {
			if redis.HasErrorPrefix(cmds[i].Err(), "NOSCRIPT") {
				cmds[i] = decideScript.Eval(ctx, client, live[i].keys, live[i].args...)
			}
		}
	}
	for i, call := range live {
		call.val, call.err = cmds[i].Result()
		close(call.done)
	}
}

// batchContext returns a context that ends at owner's deadline, or if it
// has none at the latest deadline of calls, or never if one of them has
// none. It carries no values and no cancellation of the callers: a caller
// that leaves does not cut the pipeline that also carries other callers'
// decisions.
func batchContext(owner context.Context, calls []*scriptCall) (context.Context, context.CancelFunc) {
	if dl, ok := owner.Deadline(); ok {
		return context.WithDeadline(context.Background(), dl)
	}
	var latest time.Time
	for _, call := range calls {
		dl, ok := call.ctx.Deadline()
		if !ok {
			return context.WithCancel(context.Background())
		}
		if dl.After(latest) {
			latest = dl
		}
	}
	return context.WithDeadline(context.Background(), latest)
}
