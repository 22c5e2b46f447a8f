package regional

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/ratelimit"
)

func TestMain(m *testing.M) { os.Exit(redistest.RunMain(m)) }

// scriptGrant runs one report through the owner's script on srv, after
// seeding the key with claims and the epoch (warm or not), and returns the
// grant. In the claims and the ask, an Expires other than 0 or t0 means
// live: it is set an hour ahead of now, and the TTL is an hour, so that
// nothing expires while the case runs.
func scriptGrant(t *testing.T, client *redis.Client, c Capacity, claims []Claim, a Ask, warm bool) (Granted, *Owner) {
	t.Helper()
	ctx := context.Background()
	o := NewOwner(client, OwnerOptions{Prefix: redistest.KeyPrefix(t)})
	now := time.Now().UnixMicro()
	at := func(e int64) int64 {
		switch e {
		case 0:
			return 0
		case t0:
			return 1
		}
		return now + time.Hour.Microseconds()
	}
	epoch := int64(1)
	if warm {
		epoch = now
	}
	if err := client.Set(ctx, o.prefix+"epoch", epoch, 0).Err(); err != nil {
		t.Fatal(err)
	}
	for _, cl := range claims {
		v := fmt.Sprintf("%d %d %d %d 0 %d %d %d", cl.Grant.Rate, cl.Grant.Burst, at(cl.Grant.Expires), cl.Demand,
			cl.Held.Rate, cl.Held.Burst, at(cl.Held.Expires))
		if err := client.HSet(ctx, o.prefix+"k:k", "r:"+cl.Region, v).Err(); err != nil {
			t.Fatal(err)
		}
	}
	held := a.Held
	held.Expires = at(held.Expires)
	if held.Expires == 1 {
		held = Grant{}
	}
	got, err := o.Report(ctx, a.Region, time.Hour, []KeyReport{{Key: "k",
		Limit: ratelimit.Limit{Rate: c.Rate, Burst: c.Burst, Per: time.Minute}, Demand: a.Demand, Held: held}})
	if err != nil {
		t.Fatal(err)
	}
	return got[0], o
}

// TestScriptCases runs allocateCases through the script on a real Redis.
func TestScriptCases(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: redistest.Shared(t).Addr})
	defer client.Close()
	for _, tc := range allocateCases {
		t.Run(tc.name, func(t *testing.T) {
			got, o := scriptGrant(t, client, tc.c, tc.claims, tc.ask, tc.warm)
			if got.Grant.Rate != tc.want.Rate || got.Grant.Burst != tc.want.Burst || got.Grant.None() != (tc.want.Expires == 0) {
				t.Errorf("script grant = %+v, want %+v", got.Grant, tc.want)
			}
			if got.Warm != tc.warm {
				t.Errorf("warm = %v, want %v", got.Warm, tc.warm)
			}
			cls, err := o.Claims(context.Background(), "k")
			if err != nil {
				t.Fatal(err)
			}
			for _, cl := range cls {
				if cl.Region == tc.ask.Region && (cl.Grant.Rate != tc.want.Rate || cl.Grant.Burst != tc.want.Burst) {
					t.Errorf("claim of %s = %+v, want grant %+v", cl.Region, cl, tc.want)
				}
			}
		})
	}
}

// TestScriptMatchesAllocate compares the script with Allocate on random
// states: up to four other regions with live or expired grants and held
// grants, random demands, warm or not.
func TestScriptMatchesAllocate(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: redistest.Shared(t).Addr})
	defer client.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	exp := func() int64 { return []int64{0, t0, t0 + 1}[rng.IntN(3)] }
	for i := range 150 {
		c := Capacity{Rate: 1 + rng.Int64N(MaxUnits), Burst: 1 + rng.Int64N(3000)}
		if rng.IntN(2) == 0 {
			c.Rate = 1 + rng.Int64N(3000)
		}
		var claims []Claim
		for j := range rng.IntN(5) {
			g := func() Grant {
				return Grant{Rate: rng.Int64N(c.Rate/4 + 1), Burst: rng.Int64N(c.Burst/4 + 1), Expires: exp()}
			}
			claims = append(claims, Claim{Region: "r" + strconv.Itoa(j), Grant: g(), Held: g(), Demand: rng.Int64N(2 * c.Rate)})
		}
		a := Ask{Region: "me", Demand: rng.Int64N(2 * c.Rate), Held: Grant{Rate: rng.Int64N(c.Rate + 1), Burst: rng.Int64N(c.Burst + 1), Expires: exp()}}
		warm := rng.IntN(3) == 0
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			want := Allocate(c, claims, a, t0, ttl, warm)
			got, _ := scriptGrant(t, client, c, claims, a, warm)
			if got.Grant.Rate != want.Rate || got.Grant.Burst != want.Burst || got.Grant.None() != want.None() {
				t.Errorf("capacity %+v claims %+v ask %+v warm %v: script %+v, Allocate %+v", c, claims, a, warm, got.Grant, want)
			}
		})
	}
}

// TestOwnerReloadsScript: a server flushed of its functions (a restart)
// gets the library back on the next report.
func TestOwnerReloadsScript(t *testing.T) {
	srv := redistest.StartStandalone(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer client.Close()
	o := NewOwner(client, OwnerOptions{})
	r := []KeyReport{{Key: "k", Limit: ratelimit.Limit{Rate: 10, Burst: 10, Per: time.Second}, Demand: 5}}
	for range 2 {
		if _, err := o.Report(context.Background(), "a", time.Second, r); err != nil {
			t.Fatal(err)
		}
		srv.MustDo(t, "FUNCTION", "FLUSH")
	}
}
