package routes

import (
	"fmt"
	"testing"
)

// benchSpecs returns n specs shaped like a REST API: resources with a
// collection, an item and a sub-collection route each.
func benchSpecs(n int) []Spec {
	specs := make([]Spec, 0, n)
	for i := 0; len(specs) < n; i++ {
		for _, s := range []Spec{
			{Name: fmt.Sprintf("r%d.list", i), Method: "GET", Path: fmt.Sprintf("/v1/res%d", i)},
			{Name: fmt.Sprintf("r%d.get", i), Method: "GET", Path: fmt.Sprintf("/v1/res%d/{id}", i)},
			{Name: fmt.Sprintf("r%d.sub", i), Method: "POST", Path: fmt.Sprintf("/v1/res%d/{id}/items/{item}", i)},
		} {
			if len(specs) < n {
				specs = append(specs, s)
			}
		}
	}
	return specs
}

// BenchmarkMatch shows that the cost of a lookup depends on the path, not on
// the number of routes: compare the 10 and 1000 cases.
func BenchmarkMatch(b *testing.B) {
	for _, n := range []int{10, 1000} {
		tab := mustTable(b, benchSpecs(n))
		last := n/3 - 1 // the last complete resource: a linear scan would reach it last
		for _, c := range []struct{ name, method, path string }{
			{"item", "GET", fmt.Sprintf("/v1/res%d/12345", last)},
			{"sub", "POST", fmt.Sprintf("/v1/res%d/12345/items/ab%%20c", last)},
			{"miss", "GET", "/v1/unknown/12345"},
			{"folded", "GET", fmt.Sprintf("/V1/RES%d;x=1/12345", last)},
			{"unicode", "GET", fmt.Sprintf("/v1/%%EF%%BD%%92es%d/12345", last)},
		} {
			if _, ok := tab.Match(c.method, c.path); !ok && c.name != "miss" {
				b.Fatalf("%s does not match", c.path)
			}
			b.Run(fmt.Sprintf("routes=%d/%s", n, c.name), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					tab.Match(c.method, c.path)
				}
			})
		}
	}
}

func BenchmarkMatchParallel(b *testing.B) {
	tab := mustTable(b, benchSpecs(1000))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			tab.Match("GET", "/v1/res100/12345")
		}
	})
}

func BenchmarkKey(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Key("qg", ScopeTenantRoute, "transfers", "token_bucket", "transfers.create", "acme"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkKeyPattern is the per-request cost of a key when the pattern is
// built with the configuration and the subject hashed once per request.
func BenchmarkKeyPattern(b *testing.B) {
	p, err := NewKeyPattern("qg", ScopeTenantRoute, "transfers", "token_bucket", "transfers.create")
	if err != nil {
		b.Fatal(err)
	}
	id := NewSubjectID("acme")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Key(id); err != nil {
			b.Fatal(err)
		}
	}
}
