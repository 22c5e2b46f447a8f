package regional

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/ratelimit"
)

// TestOwnerView: the owner's view of a key is what its script wrote: the
// capacity and each region's claim, sorted by region, with the global
// Redis's clock; a key no region reported is empty; a hash that is not
// the script's is ErrMalformed (wrapping ratelimit.ErrUnavailable).
func TestOwnerView(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: redistest.Shared(t).Addr})
	defer client.Close()
	ctx := context.Background()
	o := NewOwner(client, OwnerOptions{Prefix: redistest.KeyPrefix(t)})
	if err := client.Set(ctx, o.prefix+"epoch", 1, 0).Err(); err != nil { // past the warm-up
		t.Fatal(err)
	}
	lim := ratelimit.Limit{Rate: 100, Burst: 50, Per: time.Second}
	for _, r := range []struct {
		region string
		demand int64
	}{{"us", 30}, {"eu", 200}} {
		if _, err := o.Report(ctx, r.region, time.Minute, []KeyReport{{Key: "k", Limit: lim, Demand: r.demand}}); err != nil {
			t.Fatal(err)
		}
	}
	v, err := o.View(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	now, err := client.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if v.Capacity != (Capacity{Rate: 100, Burst: 50}) || v.Now <= 0 || v.Now > now.UnixMicro() {
		t.Errorf("capacity %+v now %d, want {100 50} and the owner's clock before %d", v.Capacity, v.Now, now.UnixMicro())
	}
	// us asked 30 of 100 alone: 30 and the rest as headroom, all 100;
	// then eu finds all of it claimed by us.
	got := make([][3]int64, len(v.Claims))
	var regions []string
	for i, c := range v.Claims {
		regions = append(regions, c.Region)
		got[i] = [3]int64{c.Grant.Rate, c.Grant.Burst, c.Demand}
		if c.Grant.Expires <= v.Now {
			t.Errorf("%s: grant expires at %d, before the view's now %d", c.Region, c.Grant.Expires, v.Now)
		}
	}
	if want := [][3]int64{{0, 0, 100}, {100, 50, 30}}; !slices.Equal(regions, []string{"eu", "us"}) || !slices.Equal(got, want) {
		t.Errorf("claims %v %v, want eu then us: %v (rate, burst, demand)", regions, got, want)
	}

	if v, err := o.View(ctx, "none"); err != nil || v.Capacity != (Capacity{}) || len(v.Claims) != 0 {
		t.Errorf("a key never reported: %+v, %v; want empty", v, err)
	}
	if err := client.HSet(ctx, o.prefix+"k:bad", "rate", "x", "burst", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := o.View(ctx, "bad"); !errors.Is(err, ErrMalformed) || !errors.Is(err, ratelimit.ErrUnavailable) {
		t.Errorf("a malformed capacity: %v, want ErrMalformed", err)
	}
}
