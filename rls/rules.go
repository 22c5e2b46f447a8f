package rls

import (
	"strings"

	"github.com/quotagate/quotagate/ratelimit"
)

// Entry is one key/value pair of a descriptor, as a client sends it.
type Entry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// Rule is the limit of one node of a descriptor tree. It is immutable.
type Rule struct {
	// Path names the rule in metrics and spans: the domain, then each
	// level's key, with "_value" where the configuration names a value
	// (rl.source_cluster_proxy.destination_cluster). It holds configured
	// text only, never a client's value.
	Path string
	// Name and Replaces implement envoyproxy/ratelimit's replaces: a rule
	// whose Name another matched rule of the same request replaces is
	// dropped from that request.
	Name     string
	Replaces []string
	// Unit and RequestsPerUnit are the limit as written, reported to
	// clients in DescriptorStatus.current_limit.
	Unit            Unit
	RequestsPerUnit uint32
	// Unlimited rules always answer OK and touch no store.
	Unlimited bool
	// Shadow rules are decided and counted but never make a request
	// OVER_LIMIT.
	Shadow bool
	// Quota rules make a request OVER_LIMIT only when every quota rule of
	// it is over (envoyproxy/ratelimit's quota_mode).
	Quota bool
	// DetailedMetric is accepted for compatibility; metrics still carry
	// Path only (a client's values would make the label unbounded).
	DetailedMetric bool
	// Algorithm and Limit are what the store applies. Limit is zero when
	// RequestsPerUnit is 0 (every hit is over) or Unlimited.
	Algorithm ratelimit.Algorithm
	Limit     ratelimit.Limit
	// OnStoreError overrides rls.on_store_error for this rule; "" means
	// the service's default.
	OnStoreError string
	// code names Algorithm in store keys.
	code string
}

// banned reports whether every hit of r is over the limit.
func (r *Rule) banned() bool { return !r.Unlimited && r.RequestsPerUnit == 0 }

// Domain is the descriptor tree of one domain. It is immutable and safe for
// concurrent use.
type Domain struct {
	Name string
	// File is the file the domain was read from, for messages.
	File string
	root node
}

// node is one level of a descriptor tree.
type node struct {
	// exact holds the children by key and value; a key written without a
	// value is held under value "" and matches any value.
	exact map[Entry]*node
	// wild holds the children whose value contains '*', in file order.
	wild []wildNode
	rule *Rule
}

// wildNode is a child whose configured value is a pattern: each '*'
// matches any run of characters, possibly empty.
type wildNode struct {
	key   string
	parts []string // the value split at '*'
	// shared makes every value the pattern matches share one counter
	// (share_threshold).
	shared bool
	// pattern is the value as written, hashed instead of the client's
	// value when shared.
	pattern string
	n       *node
}

// Match returns the rule of the most specific path through d that a
// descriptor's entries follow to their last entry, or nil. At each level an
// entry matches, in order of preference, a child of the same key and value,
// a child of the same key whose wildcard value matches, or a child of the
// same key without a value. As in envoyproxy/ratelimit, a rule applies only
// if it sits at the level of the descriptor's last entry.
//
// values is nil unless an entry matched a share_threshold wildcard; then
// values[i] is what entry i's counter is keyed by: the pattern for such
// entries, the client's value for the others.
func (d *Domain) Match(entries []Entry) (r *Rule, values []string) {
	n := &d.root
	for i, e := range entries {
		next := n.exact[e]
		if next == nil {
			for j := range n.wild {
				w := &n.wild[j]
				if w.key == e.Key && wildMatch(w.parts, e.Value) {
					next = w.n
					if w.shared {
						if values == nil {
							values = make([]string, len(entries))
							for k := range entries {
								values[k] = entries[k].Value
							}
						}
						values[i] = w.pattern
					}
					break
				}
			}
		}
		if next == nil {
			next = n.exact[Entry{Key: e.Key}]
		}
		if next == nil {
			return nil, nil
		}
		if i == len(entries)-1 {
			if next.rule == nil {
				return nil, nil
			}
			return next.rule, values
		}
		n = next
	}
	return nil, nil
}

// wildMatch reports whether value matches the pattern split at '*'.
func wildMatch(parts []string, value string) bool {
	if len(parts) == 1 {
		return parts[0] == value
	}
	first, last := parts[0], parts[len(parts)-1]
	if len(value) < len(first)+len(last) || !strings.HasPrefix(value, first) || !strings.HasSuffix(value, last) {
		return false
	}
	rest := value[len(first) : len(value)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}

// Rules is every domain of the descriptor files, by name. It is immutable.
type Rules struct {
	domains map[string]*Domain
}

// Domain returns the named domain, or nil.
func (rs *Rules) Domain(name string) *Domain {
	if rs == nil {
		return nil
	}
	return rs.domains[name]
}

// Domains returns the number of domains.
func (rs *Rules) Domains() int {
	if rs == nil {
		return 0
	}
	return len(rs.domains)
}
