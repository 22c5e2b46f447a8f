package regional

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

const (
	t0  = int64(1_700_000_000_000_000) // µs
	ttl = int64(5_000_000)
)

func live(region string, rate, burst, demand int64) Claim {
	return Claim{Region: region, Grant: Grant{Rate: rate, Burst: burst, Expires: t0 + 1}, Demand: demand}
}

func expired(region string, rate, burst, demand int64) Claim {
	return Claim{Region: region, Grant: Grant{Rate: rate, Burst: burst, Expires: t0}, Demand: demand}
}

// allocateCases are shared with the script's test (owner_test.go).
var allocateCases = []struct {
	name   string
	c      Capacity
	claims []Claim
	ask    Ask
	warm   bool
	want   Grant // Expires 0 = None, else t0+ttl
}{
	{"alone takes all it asks plus the rest", Capacity{1000, 100}, nil, Ask{Region: "a", Demand: 300}, false, Grant{1000, 100, 1}},
	{"demand above capacity", Capacity{1000, 100}, nil, Ask{Region: "a", Demand: 5000}, false, Grant{1000, 100, 1}},
	{"zero demand alone gets headroom", Capacity{1000, 100}, nil, Ask{Region: "a"}, false, Grant{1000, 100, 1}},
	{"fair share of three", Capacity{1000, 100}, []Claim{live("b", 0, 0, 700), live("c", 0, 0, 700)}, Ask{Region: "a", Demand: 700}, false, Grant{333, 33, 1}},
	{"small demand met, rest fair", Capacity{1000, 100}, []Claim{live("b", 0, 0, 100), live("c", 0, 0, 900)}, Ask{Region: "a", Demand: 900}, false, Grant{450, 45, 1}},
	{"small demand gets its demand and headroom", Capacity{1000, 100}, []Claim{live("b", 0, 0, 200), live("c", 0, 0, 100)}, Ask{Region: "a", Demand: 100}, false, Grant{300, 30, 1}},
	{"capped by the others' grants", Capacity{1000, 100}, []Claim{live("b", 700, 70, 100), live("c", 200, 20, 100)}, Ask{Region: "a", Demand: 800}, false, Grant{100, 10, 1}},
	{"expired grants go back", Capacity{1000, 100}, []Claim{expired("b", 700, 70, 700), live("c", 200, 20, 100)}, Ask{Region: "a", Demand: 800}, false, Grant{800, 80, 1}},
	{"own old claim ignored", Capacity{1000, 100}, []Claim{live("a", 900, 90, 900)}, Ask{Region: "a", Demand: 10}, false, Grant{1000, 100, 1}},
	{"nothing left: deny", Capacity{1000, 100}, []Claim{live("b", 1000, 100, 1000)}, Ask{Region: "a", Demand: 10}, false, Grant{0, 0, 1}},
	{"burst at least 1", Capacity{1000, 3}, []Claim{live("b", 0, 0, 990)}, Ask{Region: "a", Demand: 10}, false, Grant{10, 1, 1}},
	{"burst capped by others' bursts", Capacity{1000, 10}, []Claim{live("b", 500, 10, 500)}, Ask{Region: "a", Demand: 500}, false, Grant{500, 0, 1}},
	{"warm: at most what is held", Capacity{1000, 100}, nil, Ask{Region: "a", Demand: 800, Held: Grant{300, 30, t0 + 1}}, true, Grant{300, 30, 1}},
	{"warm: share below held", Capacity{1000, 100}, []Claim{live("b", 0, 0, 900)}, Ask{Region: "a", Demand: 100, Held: Grant{300, 30, t0 + 1}}, true, Grant{100, 10, 1}},
	{"warm: nothing held, no grant", Capacity{1000, 100}, nil, Ask{Region: "a", Demand: 800}, true, Grant{}},
	{"warm: held expired, no grant", Capacity{1000, 100}, nil, Ask{Region: "a", Demand: 800, Held: Grant{300, 30, t0}}, true, Grant{}},
	{"negative demand is zero", Capacity{1000, 100}, []Claim{live("b", 0, 0, 1000)}, Ask{Region: "a", Demand: -5}, false, Grant{0, 0, 1}},
}

func TestAllocateCases(t *testing.T) {
	for _, tc := range allocateCases {
		t.Run(tc.name, func(t *testing.T) {
			got := Allocate(tc.c, tc.claims, tc.ask, t0, ttl, tc.warm)
			if want := expect(tc.want); got != want {
				t.Errorf("Allocate = %+v, want %+v", got, want)
			}
		})
	}
}

// expect turns a case's want (Expires 1 = set) into the grant at t0.
func expect(g Grant) Grant {
	if g.Expires != 0 {
		g.Expires = t0 + ttl
	}
	return g
}

// TestAllocateInvariant drives regions reporting in random order and at
// random times, with random demands, owner restarts (claims lost, a new
// warm-up) and replies lost on the way back, and checks at every step that
// what the regions hold, unexpired, never sums above the capacity.
func TestAllocateInvariant(t *testing.T) {
	for seed := range uint64(200) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { simulate(t, seed) })
	}
}

func simulate(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	regions := []string{"a", "b", "c", "d"}[:2+rng.IntN(3)]
	c := Capacity{Rate: 1 + rng.Int64N(2000), Burst: 1 + rng.Int64N(500)}
	const ttl = 5_000
	held := map[string]Grant{} // what each region enforces (its clock = the owner's here)
	var claims []Claim
	now, epoch := int64(1), int64(1)
	for step := range 400 {
		now += rng.Int64N(1500)
		if rng.IntN(100) == 0 { // the owner restarts empty
			claims, epoch = nil, now
		}
		r := regions[rng.IntN(len(regions))]
		h := held[r]
		if !h.live(now) {
			h = Grant{}
		}
		a := Ask{Region: r, Demand: rng.Int64N(2 * c.Rate), Held: h}
		g := Allocate(c, claims, a, now, ttl, now < epoch+ttl)
		claims = setClaim(claims, Claim{Region: r, Grant: g, Held: h, Demand: a.Demand})
		if rng.IntN(10) != 0 { // the reply arrives (else the region keeps h)
			if g.None() {
				delete(held, r)
			} else {
				held[r] = g
			}
		}
		var rate, burst int64
		for _, g := range held {
			if g.live(now) {
				rate += g.Rate
				burst += g.Burst
			}
		}
		if rate > c.Rate || burst > c.Burst {
			t.Fatalf("step %d at %d: regions hold rate %d burst %d > capacity %+v: %+v", step, now, rate, burst, c, held)
		}
	}
}

func setClaim(claims []Claim, cl Claim) []Claim {
	for i := range claims {
		if claims[i].Region == cl.Region {
			claims[i] = cl
			return claims
		}
	}
	return append(claims, cl)
}

// TestAllocateShift: after demand moves from 70/20/10 to 10/20/70, the
// grants follow within three rounds of reports and use the whole rate.
func TestAllocateShift(t *testing.T) {
	c := Capacity{Rate: 1000, Burst: 1000}
	var claims []Claim
	now := int64(10 * ttl)
	held := map[string]Grant{}
	round := func(demand map[string]int64) map[string]Grant {
		for _, r := range []string{"a", "b", "c"} {
			now += 1000
			g := Allocate(c, claims, Ask{Region: r, Demand: demand[r], Held: held[r]}, now, ttl, false)
			claims = setClaim(claims, Claim{Region: r, Grant: g, Held: held[r], Demand: demand[r]})
			held[r] = g
		}
		return held
	}
	for _, d := range []map[string]int64{{"a": 1400, "b": 400, "c": 200}, {"a": 200, "b": 400, "c": 1400}} {
		round(d)
		round(d)
		g := round(d)
		sum := g["a"].Rate + g["b"].Rate + g["c"].Rate
		if sum < 990 || sum > 1000 {
			t.Errorf("demand %v: grants %v sum to %d, want in [990, 1000]", d, g, sum)
		}
	}
}
