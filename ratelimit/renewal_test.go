package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/quotagate/quotagate/ratelimit"
)

// replySlots is a SlotStore whose renewals answer reply, whatever the
// items: the store, or a proxy in front of it, as it may misbehave.
type replySlots struct {
	mu    sync.Mutex
	reply ratelimit.Renewal
}

func (s *replySlots) set(r ratelimit.Renewal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reply = r
}

func (s *replySlots) RenewReport(context.Context, []ratelimit.Item) (ratelimit.Renewal, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reply, nil
}

func (s *replySlots) Renew(ctx context.Context, items []ratelimit.Item) ([]int, error) {
	r, err := s.RenewReport(ctx, items)
	return r.Lost, err
}

func (s *replySlots) Release(context.Context, []ratelimit.Item) error { return nil }

func (s *replySlots) Decide(context.Context, []ratelimit.Item) (ratelimit.Decision, error) {
	return ratelimit.Decision{}, errors.New("replySlots decides nothing")
}

func (s *replySlots) Close() error { return nil }

// badRenewals are replies to a renewal of 3 items that are not Renewals
// of them.
var badRenewals = []ratelimit.Renewal{
	{Lost: []int{2, 0}},
	{Lost: []int{1, 1}},
	{Lost: []int{3}},
	{Lost: []int{-1}},
	{Lost: []int{0, 1, 2, 3}},
	{Retaken: []int{2, 1}},
	{Retaken: []int{0, 0}},
	{Retaken: []int{1 << 40}},
	{Lost: []int{0, 1}, Retaken: []int{1}},
}

// hourSlot is a Concurrency item whose slot is renewed every 20 minutes,
// so that a keeper's own rounds never run during a test.
func hourSlot(holder string) ratelimit.Item {
	return ratelimit.Item{Key: "{r}k", Algorithm: ratelimit.Concurrency, Limit: ratelimit.Limit{Max: 10, Per: time.Hour},
		Cost: 1, Holder: holder}
}

// TestSlotKeeperRefusesBadRenewals: a renewal reply with an index out of
// range, twice or out of order is the store's failure (returned, and
// given to OnError as "renew"), and reports no slot lost or taken back;
// the slots stay held, and the next good reply is read as before.
func TestSlotKeeperRefusesBadRenewals(t *testing.T) {
	for _, bad := range badRenewals {
		t.Run(fmt.Sprintf("lost=%v,retaken=%v", bad.Lost, bad.Retaken), func(t *testing.T) {
			store := &replySlots{reply: bad}
			var failures []string
			var lost, retaken []int
			k := ratelimit.NewSlotKeeper(ratelimit.SlotKeeperOptions{
				OnError: func(op string, err error) { failures = append(failures, op+": "+err.Error()) },
				Lost: func(ls []ratelimit.LostSlot) {
					for _, l := range ls {
						lost = append(lost, l.Index)
					}
				},
				Retaken: func(ls []ratelimit.LostSlot) {
					for _, l := range ls {
						retaken = append(retaken, l.Index)
					}
				},
			})
			defer k.Close()
			h := k.Hold(store, []ratelimit.Item{hourSlot("a"), hourSlot("b"), hourSlot("c")}, false, "owner")
			defer h.Release()

			err := k.RenewAll(context.Background())
			if !errors.Is(err, ratelimit.ErrUnavailable) {
				t.Errorf("RenewAll: %v, want ErrUnavailable", err)
			}
			if len(failures) != 1 || failures[0] != "renew: "+fmt.Sprint(err) {
				t.Errorf("OnError got %q, want one renew failure", failures)
			}
			if lost != nil || retaken != nil {
				t.Errorf("reported lost %v, taken back %v; want nothing", lost, retaken)
			}

			store.set(ratelimit.Renewal{Lost: []int{1}, Retaken: []int{2}})
			if err := k.RenewAll(context.Background()); err != nil {
				t.Fatalf("RenewAll after a good reply: %v", err)
			}
			if !slices.Equal(lost, []int{1}) || !slices.Equal(retaken, []int{2}) {
				t.Errorf("after a good reply: lost %v, taken back %v; want [1], [2]", lost, retaken)
			}
		})
	}
}

// TestStackRefusesBadRenewals: a Stack reads its backend's renewal reply
// as the keeper does: one that is not a Renewal of the items is the
// backend's failure, and reports nothing.
func TestStackRefusesBadRenewals(t *testing.T) {
	items := []ratelimit.Item{hourSlot("a"), hourSlot("b"), hourSlot("c")}
	for _, bad := range badRenewals {
		t.Run(fmt.Sprintf("lost=%v,retaken=%v", bad.Lost, bad.Retaken), func(t *testing.T) {
			backend := &replySlots{reply: bad}
			s := ratelimit.NewStack(backend, ratelimit.StackOptions{})
			defer s.Close()
			r, err := s.RenewReport(context.Background(), items)
			if !errors.Is(err, ratelimit.ErrUnavailable) || r.Lost != nil || r.Retaken != nil {
				t.Errorf("RenewReport: %+v, %v; want nothing reported and ErrUnavailable", r, err)
			}
		})
	}
}
