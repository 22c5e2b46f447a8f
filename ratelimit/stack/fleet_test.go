package stack_test

import (
	"context"
	"strings"
	"testing"

	"github.com/quotagate/quotagate/ratelimit/stack"
)

// TestFleetWithoutRoster: an instance that registers nowhere (a memory
// store, or store.fleet.static) counts itself alone, so its size is the
// floor exactly, and heartbeats and Close do nothing.
func TestFleetWithoutRoster(t *testing.T) {
	for _, tc := range []struct{ floor, want int64 }{{0, 1}, {1, 1}, {4, 4}} {
		f := stack.NewFleet(stack.FleetOptions{Floor: int(tc.floor)})
		if err := f.Beat(context.Background()); err != nil {
			t.Fatalf("Beat: %v", err)
		}
		if got := f.Size(); got != tc.want {
			t.Errorf("floor %d: size %d, want %d", tc.floor, got, tc.want)
		}
		if n, known := f.Live(); n != 1 || known {
			t.Errorf("floor %d: live %d known %v, want 1 false", tc.floor, n, known)
		}
		if err := f.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if err := f.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
	}
	a, b := stack.NewInstanceID(), stack.NewInstanceID()
	if a == b || strings.Count(a, "-") < 2 {
		t.Errorf("instance ids %q and %q: want distinct host-pid-random ids", a, b)
	}
	s := stack.New(nil, stack.Options{FleetSize: 3})
	defer s.Close()
	if got := s.FleetSize(); got != 3 {
		t.Errorf("memory stack with fleet_size 3: size %d, want 3", got)
	}
}
