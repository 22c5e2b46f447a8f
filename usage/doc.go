// Package usage reads how many units a request actually used, from the
// upstream's response (Watch), and how many it asks to reserve, from the
// request (FromRequest). It never decides anything: the gateway turns what
// it reads into a reservation and a settlement.
//
// # Units
//
// A usage is a plain non-negative decimal integer: ASCII digits only, no
// sign, fraction, exponent, quotes or spaces, at most MaxUnits (2^53, the
// largest integer every JSON implementation represents exactly). Zero is a
// usage like any other: a response that reports 0 used nothing. Anything
// else (a negative number, 1.5, 1e3, "12", a value above MaxUnits) is not a
// usage: Watch treats it as absent, FromRequest as malformed.
//
// # Paths
//
// A JSON path is dotted object keys, such as "usage.total_tokens": the
// field total_tokens of the object under the key usage of the top-level
// object. Keys are compared after decoding JSON escapes, case-sensitively;
// there are no array indexes and no way to name a key that contains a dot.
// When an object of a response repeats a key, the last occurrence counts,
// as in most JSON decoders; a request body that repeats a key of the
// path, or holds one that equals it in another case, states nothing (see
// FromRequest). A path has 1 to MaxSegments segments, none empty.
//
// # Bounds
//
// Bodies are parsed as they pass, byte by byte, without being held: the
// memory per watched response is a few hundred bytes plus one byte per
// level of JSON nesting. A maxPrefix (DefaultMaxPrefix when 0) bounds what
// is parsed: a JSON body, or one server-sent event's data, longer than
// maxPrefix bytes yields no usage.
package usage
