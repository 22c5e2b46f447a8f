package slotkeeper

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/quotagate/quotagate/ratelimit"
)

// Options configure a Keeper. Zero values take the defaults.
type Options struct {
	// Timeout bounds each release, and each round of renewals; 0 means 1s.
	Timeout time.Duration
	// Released, when set, is called with the items of each store call of
	// releases once it has returned (whether or not it succeeded), so that
	// requests waiting for those keys on this instance can try again.
	Released func(items []ratelimit.Item)
	// OnError, when set, receives the failures of releases ("release") and
	// renewals ("renew"). A failed release frees its slots after their
	// Limit.Per; a failed renewal is tried again at the next round.
	OnError func(op string, err error)
	// Lost, when set, is called after a round of renewals with the slots
	// that it found no longer held (see SlotStore.Renew), if any: each is
	// reported once, no longer renewed, and not released. Their requests
	// run on; the capacity they held is free for others already.
	Lost func(lost []LostSlot)
	// Retaken, when set, is called after a round of renewals with the
	// slots that it found gone and took back (see SlotStore.Renew), if
	// any, as far as their Slots is a RenewReporter. They are held and
	// renewed as before.
	Retaken func(retaken []LostSlot)
}

// LostSlot is a held slot that a renewal found gone (and lost, or took
// back).
type LostSlot struct {
	// Owner is the owner given to Hold.
	Owner any
	// Index is the slot's item among the items given to Hold.
	Index int
	// Item is that item.
	Item ratelimit.Item
}

// Keeper holds the concurrency slots of this instance's requests in
// flight: it renews all of them together, in one Renew per store, every
// third of the shortest Limit.Per among them, so that a request running
// longer than Per keeps its slot while an instance that dies stops renewing
// and its slots free themselves within Per. It starts one goroutine; Close
// stops it. A Keeper is safe for concurrent use.
type Keeper struct {
	opts Options

	mu     sync.Mutex
	held   map[*Held]struct{}
	period time.Duration // of the running wait; 0 until something is held
	wake   chan struct{}
	closed bool

	// queues gathers the background releases per store (see
	// releaseQueue); a store's entry lives while releases are under way.
	queues map[ratelimit.Slots]*releaseQueue

	stop     chan struct{}
	running  sync.WaitGroup // the loop and the releases in flight
	releases sync.WaitGroup // the releases in flight
}

// Held is the slots of one request, from Hold until Release.
type Held struct {
	k      *Keeper
	slots  ratelimit.Slots
	items  []ratelimit.Item
	owner  any
	inline bool
	// lost marks the items whose slot a renewal found gone; nil until
	// one is. Guarded by k.mu.
	lost []bool
	once sync.Once
}

// New returns a Keeper holding nothing and starts its
// renewal loop.
func New(o Options) *Keeper {
	if o.Timeout <= 0 {
		o.Timeout = time.Second
	}
	k := &Keeper{opts: o, held: map[*Held]struct{}{}, queues: map[ratelimit.Slots]*releaseQueue{},
		wake: make(chan struct{}, 1), stop: make(chan struct{})}
	k.running.Add(1)
	go k.loop()
	return k
}

// Hold records that items (Concurrency items an admitted Decide of s took)
// are held until the returned Held is released, and renews them meanwhile.
// inline makes Release free them in the caller's goroutine: for a store of
// this process, whose release waits on no I/O, that is cheaper than a
// goroutine and frees the slots before Release returns. owner is given
// back with each of the items found lost (see Options.Lost); the
// keeper does not look at it.
func (k *Keeper) Hold(s ratelimit.Slots, items []ratelimit.Item, inline bool, owner any) *Held {
	h := &Held{k: k, slots: s, items: items, owner: owner, inline: inline}
	p := shortestPer(items) / 3
	k.mu.Lock()
	k.held[h] = struct{}{}
	shorter := k.period == 0 || p < k.period
	k.mu.Unlock()
	if shorter {
		select {
		case k.wake <- struct{}{}:
		default:
		}
	}
	return h
}

// Release stops renewing h's slots and frees them in the store, in the
// background under the keeper's Timeout, so that it never waits for the
// store (unless h was held inline). Releases of one store that come while
// an earlier one is in flight are sent together once it returns, in one
// Release. Slots found lost are not released. Calls after the first do
// nothing.
func (h *Held) Release() {
	h.once.Do(func() {
		k := h.k
		k.mu.Lock()
		delete(k.held, h)
		items := h.items
		if h.lost != nil {
			items = nil
			for i, it := range h.items {
				if !h.lost[i] {
					items = append(items, it)
				}
			}
		}
		run := !k.closed && len(items) > 0
		if run {
			k.running.Add(1)
			k.releases.Add(1)
		}
		start := run && !h.inline && k.enqueueLocked(h.slots, items)
		k.mu.Unlock()
		switch {
		case run && h.inline:
			k.release(h.slots, items, 1)
		case start:
			go k.drain(h.slots)
		}
	})
}

// Wait blocks until the releases started so far have returned (their
// Released callbacks included).
func (k *Keeper) Wait() { k.releases.Wait() }

// Len returns the number of requests whose slots are held.
func (k *Keeper) Len() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.held)
}

// RenewAll renews every held slot not yet found lost now: one Renew per
// store, under ctx, and then reports the slots found lost (see
// Options.Lost). It returns the first failure (see
// Options.OnError). A store's reply that is not a Renewal of
// its items (an index out of range, twice, or out of order) is that
// store's failure, and reports nothing.
func (k *Keeper) RenewAll(ctx context.Context) error {
	k.mu.Lock()
	by := map[ratelimit.Slots]*renewRound{}
	for h := range k.held {
		r := by[h.slots]
		if r == nil {
			r = &renewRound{}
			by[h.slots] = r
		}
		for i, it := range h.items {
			if h.lost == nil || !h.lost[i] {
				r.items = append(r.items, it)
				r.refs = append(r.refs, heldRef{h, i})
			}
		}
	}
	k.mu.Unlock()
	var first error
	var lost, retaken []LostSlot
	for s, r := range by {
		if len(r.items) == 0 {
			continue
		}
		rn, err := ratelimit.RenewWith(ctx, s, r.items)
		if err != nil {
			if k.opts.OnError != nil {
				k.opts.OnError("renew", err)
			}
			if first == nil {
				first = err
			}
		}
		again := k.applyRenewal(r, rn, &lost, &retaken)
		if len(again) > 0 {
			// Released while the renewal ran: the renewal may have taken
			// back a slot that the release had freed.
			if err := s.Release(ctx, again); err != nil && k.opts.OnError != nil {
				k.opts.OnError("release", err)
			}
			if k.opts.Released != nil {
				k.opts.Released(again)
			}
		}
	}
	if len(lost) > 0 && k.opts.Lost != nil {
		k.opts.Lost(lost)
	}
	if len(retaken) > 0 && k.opts.Retaken != nil {
		k.opts.Retaken(retaken)
	}
	return first
}

// heldRef is item i of a Held.
type heldRef struct {
	h *Held
	i int
}

// renewRound is one store's part of a RenewAll: the items renewed, and
// whose each is.
type renewRound struct {
	items []ratelimit.Item
	refs  []heldRef
}

// applyRenewal marks the slots that rn (checked: see Renewal.check) found
// lost in r, appends those of holders still held to lost and those taken
// back to retaken, and returns the items of holders released while the
// renewal ran that it did not find lost: their release may have come
// before the renewal took them back.
func (k *Keeper) applyRenewal(r *renewRound, rn ratelimit.Renewal, lost, retaken *[]LostSlot) (again []ratelimit.Item) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for j, ref := range r.refs {
		if _, held := k.held[ref.h]; !held {
			if _, isLost := slices.BinarySearch(rn.Lost, j); !isLost {
				again = append(again, r.items[j])
			}
		}
	}
	for _, j := range rn.Lost {
		h, i := r.refs[j].h, r.refs[j].i
		if _, held := k.held[h]; !held {
			continue // released meanwhile: the release freed it
		}
		if h.lost == nil {
			h.lost = make([]bool, len(h.items))
		}
		if !h.lost[i] {
			h.lost[i] = true
			*lost = append(*lost, LostSlot{Owner: h.owner, Index: i, Item: h.items[i]})
		}
	}
	for _, j := range rn.Retaken {
		h, i := r.refs[j].h, r.refs[j].i
		if _, held := k.held[h]; held {
			*retaken = append(*retaken, LostSlot{Owner: h.owner, Index: i, Item: h.items[i]})
		}
	}
	return again
}

// loop renews every held slot each period, a third of the shortest Per
// held (or last held); a Hold with a shorter Per restarts the wait.
func (k *Keeper) loop() {
	defer k.running.Done()
	for {
		k.mu.Lock()
		p := time.Duration(0)
		for h := range k.held {
			if q := shortestPer(h.items) / 3; p == 0 || q < p {
				p = q
			}
		}
		if p == 0 {
			// Nothing held: keep ticking at the last period, so that the
			// next Hold of the same policies need not wake the loop.
			p = k.period
		}
		k.period = p
		k.mu.Unlock()
		var tick <-chan time.Time
		var t *time.Timer
		if p > 0 {
			t = time.NewTimer(p)
			tick = t.C
		}
		select {
		case <-k.stop:
			if t != nil {
				t.Stop()
			}
			return
		case <-k.wake:
			if t != nil {
				t.Stop()
			}
		case <-tick:
			ctx, cancel := context.WithTimeout(context.Background(), k.opts.Timeout)
			_ = k.RenewAll(ctx)
			cancel()
		}
	}
}

// Close stops renewing and waits for the releases in flight. Slots still
// held are not released: they free themselves after their Per. Hold and
// Release after Close renew and release nothing.
func (k *Keeper) Close() {
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		return
	}
	k.closed = true
	k.mu.Unlock()
	close(k.stop)
	k.running.Wait()
}

// shortestPer is the shortest Limit.Per of items, at least 3 ns so that a
// third of it is a period.
func shortestPer(items []ratelimit.Item) time.Duration {
	p := time.Duration(0)
	for _, it := range items {
		if p == 0 || it.Limit.Per < p {
			p = it.Limit.Per
		}
	}
	return max(p, 3)
}
