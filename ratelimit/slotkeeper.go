package ratelimit

import (
	"context"
	"sync"
	"time"
)

// Slots releases and renews concurrency slots: a SlotStore, or a Stack.
type Slots interface {
	Release(ctx context.Context, items []Item) error
	Renew(ctx context.Context, items []Item) error
}

// SlotKeeperOptions configure a SlotKeeper. Zero values take the defaults.
type SlotKeeperOptions struct {
	// Timeout bounds each release, and each round of renewals; 0 means 1s.
	Timeout time.Duration
	// Released, when set, is called with the items of each release once
	// its store call has returned (whether or not it succeeded), so that
	// requests waiting for those keys on this instance can try again.
	Released func(items []Item)
	// OnError, when set, receives the failures of releases ("release") and
	// renewals ("renew"). A failed release frees its slots after their
	// Limit.Per; a failed renewal is tried again at the next round.
	OnError func(op string, err error)
}

// SlotKeeper holds the concurrency slots of this instance's requests in
// flight: it renews all of them together, in one Renew per store, every
// third of the shortest Limit.Per among them, so that a request running
// longer than Per keeps its slot while an instance that dies stops renewing
// and its slots free themselves within Per. It starts one goroutine; Close
// stops it. A SlotKeeper is safe for concurrent use.
type SlotKeeper struct {
	opts SlotKeeperOptions

	mu     sync.Mutex
	held   map[*Held]struct{}
	period time.Duration // of the running wait; 0 until something is held
	wake   chan struct{}
	closed bool

	stop     chan struct{}
	running  sync.WaitGroup // the loop and the releases in flight
	releases sync.WaitGroup // the releases in flight
}

// Held is the slots of one request, from Hold until Release.
type Held struct {
	k      *SlotKeeper
	slots  Slots
	items  []Item
	inline bool
	once   sync.Once
}

// NewSlotKeeper returns a SlotKeeper holding nothing and starts its
// renewal loop.
func NewSlotKeeper(o SlotKeeperOptions) *SlotKeeper {
	if o.Timeout <= 0 {
		o.Timeout = time.Second
	}
	k := &SlotKeeper{opts: o, held: map[*Held]struct{}{}, wake: make(chan struct{}, 1), stop: make(chan struct{})}
	k.running.Add(1)
	go k.loop()
	return k
}

// Hold records that items (Concurrency items an admitted Decide of s took)
// are held until the returned Held is released, and renews them meanwhile.
// inline makes Release free them in the caller's goroutine: for a store of
// this process, whose release waits on no I/O, that is cheaper than a
// goroutine and frees the slots before Release returns.
func (k *SlotKeeper) Hold(s Slots, items []Item, inline bool) *Held {
	h := &Held{k: k, slots: s, items: items, inline: inline}
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
// store (unless h was held inline). Calls after the first do nothing.
func (h *Held) Release() {
	h.once.Do(func() {
		k := h.k
		k.mu.Lock()
		delete(k.held, h)
		closed := k.closed
		if !closed {
			k.running.Add(1)
			k.releases.Add(1)
		}
		k.mu.Unlock()
		switch {
		case closed:
		case h.inline:
			h.release()
		default:
			go h.release()
		}
	})
}

// release frees h's slots in the store and reports it.
func (h *Held) release() {
	k := h.k
	defer k.running.Done()
	defer k.releases.Done()
	ctx, cancel := context.WithTimeout(context.Background(), k.opts.Timeout)
	defer cancel()
	if err := h.slots.Release(ctx, h.items); err != nil && k.opts.OnError != nil {
		k.opts.OnError("release", err)
	}
	if k.opts.Released != nil {
		k.opts.Released(h.items)
	}
}

// Wait blocks until the releases started so far have returned (their
// Released callbacks included).
func (k *SlotKeeper) Wait() { k.releases.Wait() }

// Len returns the number of requests whose slots are held.
func (k *SlotKeeper) Len() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.held)
}

// RenewAll renews every held slot now: one Renew per store, under ctx. It
// returns the failures joined (see SlotKeeperOptions.OnError).
func (k *SlotKeeper) RenewAll(ctx context.Context) error {
	k.mu.Lock()
	by := map[Slots][]Item{}
	for h := range k.held {
		by[h.slots] = append(by[h.slots], h.items...)
	}
	k.mu.Unlock()
	var first error
	for s, items := range by {
		if err := s.Renew(ctx, items); err != nil {
			if k.opts.OnError != nil {
				k.opts.OnError("renew", err)
			}
			if first == nil {
				first = err
			}
		}
	}
	return first
}

// loop renews every held slot each period, a third of the shortest Per
// held (or last held); a Hold with a shorter Per restarts the wait.
func (k *SlotKeeper) loop() {
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
func (k *SlotKeeper) Close() {
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
func shortestPer(items []Item) time.Duration {
	p := time.Duration(0)
	for _, it := range items {
		if p == 0 || it.Limit.Per < p {
			p = it.Limit.Per
		}
	}
	return max(p, 3)
}
