package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/slotkeeper"
	"github.com/quotagate/quotagate/ratelimit/stack"
	"github.com/quotagate/quotagate/telemetry"
)

// slotState is the gateway's part in concurrency policies, shared by every
// pipeline so that slots taken before a reload are renewed and released
// after it: the keeper of the slots held, the queues of the requests
// waiting, the holder names and the in-flight counts per policy.
type slotState struct {
	keeper *slotkeeper.Keeper
	queues *slotQueues
	// instance starts every holder name; seq numbers the requests.
	instance string
	seq      atomic.Uint64

	inflight sync.Map // policy name -> *policySlots
}

// policySlots is one concurrency policy's slots held on this instance.
type policySlots struct {
	name     string
	inflight atomic.Int64
}

// A release or renewal that fails is counted in the store errors and
// logged at warn (at most a few lines per op and period, by logLimit):
// a failed release keeps its slots until their slot_ttl, a failed
// renewal may lose them.
func newSlotState(logger *slog.Logger, metrics *telemetry.Metrics, logLimit *telemetry.LogLimiter) *slotState {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	s := &slotState{queues: newSlotQueues(), instance: hex.EncodeToString(b[:])}
	s.keeper = slotkeeper.New(slotkeeper.Options{
		Released: func(items []ratelimit.Item) {
			for _, it := range items {
				s.queues.notify(it.Key)
			}
		},
		OnError: func(op string, err error) {
			ctx := context.Background()
			metrics.StoreError(ctx, ratelimit.FailureKind(err))
			if ok, suppressed := logLimit.Allow("slot " + op); ok {
				logger.LogAttrs(ctx, slog.LevelWarn, "concurrency slot "+op+" failed",
					slog.String("error", err.Error()), slog.Int("suppressed", suppressed))
			}
		},
		Lost: func(lost []slotkeeper.LostSlot) { s.lost(lost, logger, metrics) },
		Retaken: func(retaken []slotkeeper.LostSlot) {
			for policy, n := range s.perPolicy(retaken) {
				metrics.SlotsRetaken(context.Background(), policy, n)
			}
		},
	})
	return s
}

// lost records the slots a renewal round found gone (expired while this
// instance could not renew them, or deleted from the store): counted per
// policy, logged once per policy and round at warn. Their requests run on,
// since an upstream call cannot be cancelled safely half-way; the
// capacity is already free, so requests waiting here for the key try again.
func (s *slotState) lost(lost []slotkeeper.LostSlot, logger *slog.Logger, metrics *telemetry.Metrics) {
	ctx := context.Background()
	for _, l := range lost {
		s.queues.notify(l.Item.Key)
	}
	for policy, n := range s.perPolicy(lost) {
		metrics.SlotsLost(ctx, policy, n)
		logger.LogAttrs(ctx, slog.LevelWarn, "concurrency slots lost: their requests run on without them",
			slog.String("policy", policy), slog.Int64("slots", n))
	}
}

// perPolicy counts slots by the name of their concurrency policy.
func (s *slotState) perPolicy(slots []slotkeeper.LostSlot) map[string]int64 {
	per := map[string]int64{}
	for _, l := range slots {
		if hs, ok := l.Owner.(*heldSlots); ok && l.Index < len(hs.policies) {
			per[hs.policies[l.Index].name]++
		}
	}
	return per
}

// holder returns a name no other request of the fleet holds a slot under:
// this instance's random id and a sequence number.
func (s *slotState) holder() string {
	var buf [48]byte // 16 hex digits, ":", at most 13 base-36 digits
	b := append(append(buf[:0], s.instance...), ':')
	return string(strconv.AppendUint(b, s.seq.Add(1), 36))
}

// counter returns the in-flight count of policy.
func (s *slotState) counter(policy string) *policySlots {
	if c, ok := s.inflight.Load(policy); ok {
		return c.(*policySlots)
	}
	c, _ := s.inflight.LoadOrStore(policy, &policySlots{name: policy})
	return c.(*policySlots)
}

// inflightOf returns the number of slots of policy held on this instance.
func (s *slotState) inflightOf(policy string) int64 {
	if c, ok := s.inflight.Load(policy); ok {
		return c.(*policySlots).inflight.Load()
	}
	return 0
}

// heldSlots is what one admitted request holds until its response is done.
// It owns its slotkeeper.Held: policies[i] is the policy of its item i.
type heldSlots struct {
	held     *slotkeeper.Held
	policies []*policySlots
	since    time.Time
	// Room for the one slot most requests hold, so that holding it
	// allocates nothing more.
	onePolicy [1]*policySlots
	oneItem   [1]ratelimit.Item
}

// hold records the slots that the admitted decision d of items took: the
// concurrency items that allowed, except those a store failure let through
// without deciding (on_store_error open). nil when there are none. inline
// releases them in the request's goroutine: for the memory store, which
// waits on no I/O.
func (s *slotState) hold(store *stack.Stack, inline bool, ps []boundPolicy, items []ratelimit.Item, d ratelimit.Decision, now time.Time) *heldSlots {
	took := func(i int) bool {
		res := d.Results[i]
		return items[i].Algorithm == ratelimit.Concurrency && res.Allowed &&
			(d.Failure == nil || res.Fallback == ratelimit.OnErrorLocal)
	}
	n := 0
	for i := range items {
		if took(i) {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	hs := &heldSlots{since: now}
	taken, policies := hs.oneItem[:0], hs.onePolicy[:0]
	if n > 1 {
		taken, policies = make([]ratelimit.Item, 0, n), make([]*policySlots, 0, n)
	}
	for i := range items {
		if !took(i) {
			continue
		}
		taken = append(taken, items[i])
		c := s.counter(ps[i].name)
		c.inflight.Add(1)
		policies = append(policies, c)
	}
	hs.policies = policies
	hs.held = s.keeper.Hold(store, taken, inline, hs)
	return hs
}

// release gives the slots back (in the background) and records on the
// request span how long they were held.
func (h *heldSlots) release(span trace.Span, now func() time.Time) {
	h.held.Release() // first: inline, the slots are free once the count drops
	for _, c := range h.policies {
		c.inflight.Add(-1)
	}
	if span.IsRecording() {
		span.SetAttributes(telemetry.AttrSlotHeldMS.Int64(ceilMillis(now().Sub(h.since))))
	}
}

// close stops renewing. Slots still held free themselves after slot_ttl.
func (s *slotState) close() { s.keeper.Close() }

// queueFor returns the index of the policy whose queue a denied decision
// may wait in: the first non-shadow concurrency policy with a queue that
// denied, provided that every non-shadow policy that denied is one (a
// request over a rate limit does not wait). -1 otherwise.
func queueFor(ps []boundPolicy, d ratelimit.Decision) int {
	at := -1
	for i, res := range d.Results {
		if res.Allowed || ps[i].shadow {
			continue
		}
		if ps[i].queue == nil {
			return -1
		}
		if at < 0 {
			at = i
		}
	}
	return at
}

// waitingFor returns the index of a policy with a queue in which requests
// for the same key already wait on this instance, so that a new request
// queues behind them rather than taking a slot first; -1 when none.
func (s *slotState) waitingFor(ps []boundPolicy, items []ratelimit.Item) int {
	for i := range ps {
		if ps[i].queue != nil && !ps[i].shadow && s.queues.waiting(items[i].Key) > 0 {
			return i
		}
	}
	return -1
}

// queueResult is how a request came out of a queue.
type queueResult struct {
	policy string        // the policy whose queue it waited in; "" if it did not wait
	waited time.Duration // on the gateway's clock
	gone   bool          // the client went away while waiting
}

// decide decides items, and, when only concurrency policies with a queue
// deny (or requests already wait for their key here), waits in the queue
// of the first such policy: the head of the queue asks the store again
// whenever a slot of its key is released on this instance and every
// slotQueueRetry, until it is admitted, a rate policy denies, the store
// fails, the client goes away, or the queue's timeout passes (then the
// last denial stands). A full queue is an immediate denial.
func (g *Gateway) decide(ctx context.Context, p *pipeline, ps []boundPolicy, items []ratelimit.Item) (ratelimit.Decision, queueResult, error) {
	var d ratelimit.Decision
	var err error
	decided := false
	qi := g.slots.waitingFor(ps, items)
	if qi < 0 {
		d, err = g.storeDecide(ctx, p, items)
		if err != nil || d.Allowed || d.Unavailable {
			return d, queueResult{}, err
		}
		if qi = queueFor(ps, d); qi < 0 {
			return d, queueResult{}, nil
		}
		decided = true
	}
	key, spec := items[qi].Key, ps[qi].queue
	// The timeout runs from before the request is seen waiting.
	start := g.opts.Now()
	deadline := g.opts.After(spec.timeout)
	w := g.slots.queues.enter(key, spec.max)
	if w == nil { // full
		if !decided {
			d, err = g.storeDecide(ctx, p, items)
		}
		return d, queueResult{}, err
	}
	defer g.slots.queues.leave(key, w)
	qr := queueResult{policy: ps[qi].name}
	// A request that was just denied waits for a release or a retry; one
	// that joined others in the queue asks as soon as it is at the head.
	try := !decided && g.slots.queues.head(key, w)
	for {
		if try {
			d, err = g.storeDecide(ctx, p, items)
			decided = true
			if err != nil || d.Allowed || d.Unavailable || queueFor(ps, d) < 0 {
				qr.waited = g.opts.Now().Sub(start)
				return d, qr, err
			}
		}
		var retry <-chan time.Time
		if g.slots.queues.head(key, w) {
			retry = g.opts.After(slotQueueRetry)
		}
		select {
		case <-deadline:
			qr.waited = g.opts.Now().Sub(start)
			if !decided { // it never reached the head: one last look
				d, err = g.storeDecide(ctx, p, items)
			}
			return d, qr, err
		case <-ctx.Done():
			qr.waited, qr.gone = g.opts.Now().Sub(start), true
			return d, qr, ctx.Err()
		case <-w.wake:
			try = g.slots.queues.head(key, w)
		case <-retry:
			try = true
		}
	}
}

// storeDecide is one store decision, timed.
func (g *Gateway) storeDecide(ctx context.Context, p *pipeline, items []ratelimit.Item) (ratelimit.Decision, error) {
	start := time.Now()
	d, err := p.store.Decide(ctx, items)
	elapsed := time.Since(start)
	if m := g.opts.Metrics; m != nil {
		m.RecordDecisionDuration(ctx, g.series.stageGlobal, elapsed)
		m.RecordStoreCall(ctx, g.series.opDecide, elapsed)
	}
	return d, err
}
