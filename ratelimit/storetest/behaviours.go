package storetest

import (
	"time"

	"github.com/quotagate/quotagate/ratelimit"
)

// behaviours run once per algorithm, each with a fresh env and a spec of
// capacity 5 per 10 s.
var behaviours = []struct {
	name string
	run  func(e *env, s spec)
}{
	{"all_or_nothing", testAllOrNothing},
	{"shadow", testShadow},
	{"peek", testPeek},
	{"isolation", testIsolation},
	{"clock_backwards", testClockBackwards},
	{"retry_after_exact", testRetryAfterExact},
	{"idle_key_full", testIdleFull},
}

// wantAllowed fails the test unless r.Allowed == allowed.
func (e *env) wantAllowed(what string, r ratelimit.Result, allowed bool) {
	e.t.Helper()
	if r.Allowed != allowed {
		e.t.Fatalf("%s: Allowed = %v, want %v (result %+v)", what, r.Allowed, allowed, r)
	}
}

// wantRemaining fails the test unless key name has want units left.
func (e *env) wantRemaining(what, name string, s spec, want int64) {
	e.t.Helper()
	if got := e.remaining(name, s); got != want {
		e.t.Fatalf("%s: %s has %d remaining, want %d", what, name, got, want)
	}
}

func testAllOrNothing(e *env, s spec) {
	c := s.capacity()
	e.set(0)
	e.wantAllowed("drain c", e.one(e.item("c", s, c)), true)

	d := e.decide(e.item("a", s, 2), e.item("b", s, 3), e.item("c", s, 1))
	if d.Allowed {
		e.t.Fatalf("batch with a denying item was admitted: %+v", d)
	}
	for i, name := range []string{"a", "b"} {
		if r := d.Results[i]; !r.Allowed || r.Remaining != c || r.RetryAfter != 0 {
			e.t.Errorf("%s in a denied batch: got %+v, want allowed with %d remaining (nothing taken)", name, r, c)
		}
	}
	if r := d.Results[2]; r.Allowed || r.RetryAfter <= 0 {
		e.t.Errorf("c: got %+v, want denied with a positive RetryAfter", r)
	}
	if d.RetryAfter != d.Results[2].RetryAfter {
		e.t.Errorf("Decision.RetryAfter = %v, want c's %v", d.RetryAfter, d.Results[2].RetryAfter)
	}
	e.wantRemaining("after the denied batch", "a", s, c)
	e.wantRemaining("after the denied batch", "b", s, c)

	d = e.decide(e.item("a", s, 2), e.item("b", s, 3))
	if !d.Allowed || d.RetryAfter != 0 || d.Results[0].Remaining != c-2 || d.Results[1].Remaining != c-3 {
		e.t.Fatalf("admitted batch: got %+v, want allowed with %d and %d remaining", d, c-2, c-3)
	}
	e.wantRemaining("after the admitted batch", "a", s, c-2)
	e.wantRemaining("after the admitted batch", "b", s, c-3)
}

func testShadow(e *env, s spec) {
	c := s.capacity()
	e.set(0)
	shadow := func(name string, cost int64) ratelimit.Item {
		it := e.item(name, s, cost)
		it.Shadow = true
		return it
	}

	// A denying shadow item does not deny the batch.
	e.wantAllowed("drain sd", e.one(e.item("sd", s, c)), true)
	d := e.decide(e.item("n1", s, 1), shadow("sd", 1))
	if !d.Allowed || d.RetryAfter != 0 || d.Results[1].Allowed || d.Results[1].RetryAfter <= 0 {
		e.t.Fatalf("batch with a denying shadow item: got %+v, want admitted, shadow result denied", d)
	}
	e.wantRemaining("non-shadow item of an admitted batch", "n1", s, c-1)
	d = e.decide(shadow("sd", 1))
	if !d.Allowed || d.RetryAfter != 0 {
		e.t.Fatalf("batch of one denying shadow item: got %+v, want admitted", d)
	}

	// An allowing shadow item of a denied batch takes nothing.
	e.wantAllowed("drain n2", e.one(e.item("n2", s, c)), true)
	d = e.decide(e.item("n2", s, 1), shadow("s2", 2))
	if d.Allowed || !d.Results[1].Allowed || d.RetryAfter != d.Results[0].RetryAfter {
		e.t.Fatalf("denied batch with a shadow item: got %+v", d)
	}
	e.wantRemaining("shadow item of a denied batch", "s2", s, c)

	// An allowing shadow item of an admitted batch takes its cost.
	d = e.decide(e.item("n3", s, 1), shadow("s3", 2))
	if !d.Allowed || !d.Results[1].Allowed || d.Results[1].Remaining != c-2 {
		e.t.Fatalf("admitted batch with a shadow item: got %+v", d)
	}
	e.wantRemaining("shadow item of an admitted batch", "s3", s, c-2)
}

func testPeek(e *env, s spec) {
	c := s.capacity()
	e.set(0)
	want := ratelimit.Result{Allowed: true, Limit: c, Remaining: c}
	for i := range 3 {
		if r := e.one(e.item("p", s, 0)); r != e.stamped(want) {
			e.t.Fatalf("peek %d at an absent key: got %+v, want %+v", i, r, want)
		}
	}
	e.wantAllowed("take 2", e.one(e.item("p", s, 2)), true)
	first := e.one(e.item("p", s, 0))
	if first.Remaining != c-2 || !first.Allowed {
		e.t.Fatalf("peek after taking 2: got %+v, want allowed with %d remaining", first, c-2)
	}
	if again := e.one(e.item("p", s, 0)); again != first {
		e.t.Fatalf("a second peek changed the key: %+v, then %+v", first, again)
	}
	e.wantAllowed("take the rest", e.one(e.item("p", s, c-2)), true)
	if r := e.one(e.item("p", s, 0)); !r.Allowed || r.Remaining != 0 || r.RetryAfter != 0 {
		e.t.Fatalf("peek at an empty key: got %+v, want allowed (cost 0 always fits) with 0 remaining", r)
	}
}

func testIsolation(e *env, s spec) {
	c := s.capacity()
	e.set(0)
	e.wantAllowed("drain x", e.one(e.item("x", s, c)), true)
	for _, name := range []string{"y", "x2", "X", "x "} {
		e.wantRemaining("beside a drained key", name, s, c)
	}
	e.wantRemaining("drained", "x", s, 0)
}

func testClockBackwards(e *env, s spec) {
	c := s.capacity()
	e.set(10)
	e.wantAllowed("take 2 from j", e.one(e.item("j", s, 2)), true)
	e.wantAllowed("drain the control key", e.one(e.item("ctl", s, c)), true)

	// In the past, j has what it had left, no more.
	e.set(-40)
	e.wantAllowed("take the rest of j in the past", e.one(e.item("j", s, c-2)), true)
	e.wantAllowed("take 1 more from j in the past", e.one(e.item("j", s, 1)), false)
	e.wantRemaining("in the past", "j", s, 0)

	// Back in the present, j is as empty as the control key, and stays
	// in step with it.
	for _, k := range []int{10, 30, 60} {
		e.set(k)
		rj := e.one(e.item("j", s, 0))
		rc := e.one(e.item("ctl", s, 0))
		if rj != rc {
			e.t.Fatalf("at t0+%v after a jump back: j %+v, control %+v", time.Duration(k)*100*time.Millisecond, rj, rc)
		}
	}
	e.set(10)
	e.wantAllowed("take 1 from j after the jump", e.one(e.item("j", s, 1)), false)
}

// exactSpec returns a limit of alg whose retry times are not round numbers.
func exactSpec(alg ratelimit.Algorithm) spec {
	if alg == ratelimit.TokenBucket {
		return spec{alg, ratelimit.Limit{Rate: 7, Per: time.Second, Burst: 5}}
	}
	return spec{alg, ratelimit.Limit{Rate: 5, Per: time.Second}}
}

func testRetryAfterExact(e *env, gen spec) {
	s := exactSpec(gen.alg)
	e.set(0)
	e.wantAllowed("take 3", e.one(e.item("r", s, 3)), true)
	e.set(3)
	e.wantAllowed("take 2", e.one(e.item("r", s, 2)), true)
	e.set(4)
	r := e.one(e.item("r", s, 3))
	if r.Allowed || r.RetryAfter <= 0 {
		e.t.Fatalf("take 3 from an almost empty key: got %+v, want denied with a positive RetryAfter", r)
	}
	e.clock.Set(at(4).Add(r.RetryAfter - time.Microsecond))
	early := e.one(e.item("r", s, 3))
	if early.Allowed || early.RetryAfter != time.Microsecond {
		e.t.Fatalf("1µs before RetryAfter (%v): got %+v, want denied with RetryAfter 1µs", r.RetryAfter, early)
	}
	e.clock.Set(at(4).Add(r.RetryAfter))
	e.wantAllowed("at RetryAfter "+r.RetryAfter.String(), e.one(e.item("r", s, 3)), true)
}

func testIdleFull(e *env, s spec) {
	c := s.capacity()
	e.set(0)
	drained := e.one(e.item("i", s, c))
	if !drained.Allowed || drained.ResetAfter <= 0 {
		e.t.Fatalf("drain: got %+v, want allowed with a positive ResetAfter", drained)
	}
	e.wantAllowed("1 more", e.one(e.item("i", s, 1)), false)

	// Full exactly when ResetAfter said, not 1µs earlier.
	e.clock.Set(at(0).Add(drained.ResetAfter - time.Microsecond))
	if r := e.one(e.item("i", s, 0)); r.Remaining >= c || r.ResetAfter != time.Microsecond {
		e.t.Fatalf("1µs before ResetAfter (%v): got %+v, want less than %d remaining, ResetAfter 1µs", drained.ResetAfter, r, c)
	}
	e.clock.Set(at(0).Add(drained.ResetAfter))
	full := ratelimit.Result{Allowed: true, Limit: c, Remaining: c}
	if r := e.one(e.item("i", s, 0)); r != e.stamped(full) {
		e.t.Fatalf("at ResetAfter: got %+v, want %+v", r, full)
	}

	// Long idle (past any expiry): exactly full, never more.
	for _, idle := range []time.Duration{time.Hour, 24 * time.Hour} {
		e.clock.Set(at(0).Add(idle))
		if r := e.one(e.item("i", s, 0)); r != e.stamped(full) {
			e.t.Fatalf("after %v idle: got %+v, want %+v", idle, r, full)
		}
	}
	e.wantAllowed("take the capacity after idling", e.one(e.item("i", s, c)), true)
	e.wantAllowed("take 1 more after idling", e.one(e.item("i", s, 1)), false)
}
