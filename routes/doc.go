// Package routes maps a request (method and path) to a configured route and
// builds the bounded store keys of rate-limit policies. It matches; it never
// limits, and it never puts a raw request path in a key.
//
// # Templates
//
// A route's path is a template of segments separated by "/":
//
//   - a literal segment, written decoded, made of RFC 3986 unreserved
//     characters, sub-delims other than ";", ":" and "@" ("transfers",
//     "v1", "a:b"), not ending in "."; it matches in any case, so two
//     templates differing only in the case of a literal have one shape;
//   - "{name}": exactly one non-empty segment;
//   - "{name...}": only as the final segment, one or more remaining segments.
//
// "/" alone is the root. A template has no empty segment, no trailing slash,
// no "." or ".." segment, no "%" and at most MaxSegments segments; parameter
// names are Go-like identifiers, unique within a template. ValidateTemplate
// checks a template on its own; NewTable checks whole specs.
//
// # Matching
//
// Table.Match takes the method and the escaped path (r.URL.EscapedPath()).
// The rules, each chosen so that the route the gateway limits is the route
// the upstream serves:
//
//   - The first matching spec in declaration order wins. Specs live in a trie
//     with one level per segment, so a lookup costs time in proportion to the
//     path's segments, not to the number of routes. Where a literal and a
//     parameter both match a segment, both branches are searched and the
//     lowest spec index among complete matches wins. Each trie node is
//     visited at most once per lookup (the trie is a tree) and a branch whose
//     lowest spec index cannot beat the best match so far is skipped, so the
//     backtracking is bounded by the size of the trie.
//   - Methods are case-sensitive (RFC 9110): "get" matches no GET route. A
//     HEAD request matches a GET route when no HEAD route matches.
//   - A trailing slash is significant: "/v1/transfers/1/" does not match
//     "/v1/transfers/{id}". Only the root "/" ends in a slash.
//   - Empty segments ("//") match nothing.
//   - Percent-encoding is decoded once per segment, and each segment is
//     compared with literals in a canonical form that every spelling an
//     upstream may fold together shares: ASCII letters lowercased (literal
//     templates match in any case), path parameters from the first ";"
//     dropped, leading spaces and trailing spaces and dots dropped, and
//     non-ASCII text folded by compatibility decomposition and case (so
//     full-width "ｔ" is "t"). "/v1/%74ransfers", "/V1/Transfers;x=1" and
//     "/v1/transfers%20" all match "/v1/transfers", never a catch-all
//     declared after it: the request is charged under the route of its
//     canonical path. See canon.go for every step.
//   - The last segment also matches a literal without a "." by its part
//     before its first "." (its format suffix dropped): Rails routes
//     "/v1/transfers.json" to "/v1/transfers" with format json, and Spring's
//     suffix pattern matching serves any "/v1/transfers.*" there. Both the
//     literal of the whole segment and that of its stem are searched, and
//     the lowest spec index wins as for any two branches; a literal holding a
//     "." ("report.csv") matches only as written.
//   - A path with a segment, not the last, that names a PHP script
//     ("index.php", "app.php": ending in ".php") is also matched without
//     that segment: Laravel and Symfony take the path up to the script as
//     their base URL and route the rest, so "/index.php/v1/transfers" is
//     their /v1/transfers. Only the first such segment is dropped; the
//     lowest spec index of the two readings wins.
//   - A path that has invalid percent-encoding, an encoded "/" (%2F) or
//     backslash (%5C), a raw backslash, an encoded control character, a
//     segment left with a percent-escape after decoding ("%2574"), invalid
//     UTF-8 (overlong forms included), a segment that folds to "/" or "\",
//     or a segment of only dots and spaces ("." "..", "...", "%2e", "..;",
//     or empty once its parameters are dropped) matches nothing: each could
//     make the upstream see another route than the one that was limited.
//   - A path that is not origin-form (does not start with "/"), longer than
//     MaxPathLength bytes or with more than MaxSegments segments matches
//     nothing.
//   - The query is not part of the path: if the argument contains "?", the
//     rest from there on is ignored.
//
// A path that matches nothing is answered 404 by the gateway.
//
// # Keys
//
// Key builds the store key of one policy for one request. Every key reads
//
//	<prefix>:{<tag>}:<policy>[:<route>]:<algorithm code>
//
// where the part in braces is the Redis Cluster hash tag, which decides the
// key's slot:
//
//	scope          tag            route part
//	tenant         t:<HashID(s)>  no
//	tenant_route   t:<HashID(s)>  yes
//	route          r:<route>      yes
//	global         g:<policy>     no
//
// s is the subject (the caller's tenant or address, namespaced by how the
// caller was identified; see identity.Caller.Subject). Hashing it puts all of one
// tenant's keys in one slot, so they can be decided in one atomic step, and
// keeps tenant names and addresses out of Redis. The algorithm code (tb, fw,
// sw, sl, cc) ends the key, so a reload that changes a policy's algorithm starts
// from fresh state instead of misreading the old one. Names (prefix, policy,
// route) contain no ":" or braces, so two different tuples never produce the
// same key.
package routes
