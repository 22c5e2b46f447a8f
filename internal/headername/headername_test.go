package headername

import "testing"

func TestEqual(t *testing.T) {
	cases := []struct {
		name, lower string
		want        bool
	}{
		{"X-Quotagate-Tenant", "x-quotagate-tenant", true},
		{"X_Quotagate_Tenant", "x-quotagate-tenant", true},
		{"x_qUOTAGATE-tenant", "x-quotagate-tenant", true},
		{"X-Quotagate-Tenan", "x-quotagate-tenant", false},
		{"X-Quotagate-Tenants", "x-quotagate-tenant", false},
		{"X.Quotagate-Tenant", "x-quotagate-tenant", false},
		{"", "", true},
	}
	if !Same("X_max_tokens", "X-MAX_TOKENS") || Same("X_max_tokens", "X.MAX_TOKENS") {
		t.Error(`Same reads "_" and "-" alike, ignoring case, in both names`)
	}
	for _, c := range cases {
		if got := Equal(c.name, c.lower); got != c.want {
			t.Errorf("Equal(%q, %q) = %v, want %v", c.name, c.lower, got, c.want)
		}
		if got := Same(c.lower, c.name); got != c.want {
			t.Errorf("Same(%q, %q) = %v, want %v", c.lower, c.name, got, c.want)
		}
	}
}
