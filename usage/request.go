package usage

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"strings"

	"github.com/quotagate/quotagate/internal/headername"
)

// ErrMalformed is wrapped by FromRequest's error when a source is present
// but does not hold a usage (see the package doc); a gateway answers 400.
var ErrMalformed = errors.New("not a whole number of units between 0 and 2^53")

// RequestSource says where a request states how many units to reserve.
// Empty fields are not looked at. With JSON set, a request that has a body
// states its reservation there only (see FromRequest); Header counts for a
// request without a body, or when JSON is not set.
type RequestSource struct {
	// Header is the name of a request header.
	Header string
	// JSON is a dotted path into a JSON request body (whatever its
	// Content-Type says), such as "max_tokens".
	JSON string
	// JSONAliases are more paths into the body that the upstream takes
	// for the same limit, such as "max_completion_tokens" beside
	// "max_tokens" (read only with JSON): a body that states several
	// reserves the largest, and one that states any of them ambiguously
	// states nothing.
	JSONAliases []string
	// JSONCount is a path into the body whose value multiplies the work
	// asked for, such as "n" (the number of completions, each up to
	// max_tokens; read only with JSON): the stated reservation is
	// multiplied by it (absent, null or 0 count as 1, a product past
	// MaxUnits as MaxUnits). A value that is not a usage is malformed,
	// and one stated ambiguously states nothing, as for JSON.
	JSONCount string
}

// Validate reports whether s can be used: Header a valid field name, JSON
// a valid path. The error names the field. FromRequest itself does not
// validate: an invalid field is never present.
func (s RequestSource) Validate() error {
	errs := []error{validHeader("header", s.Header), validPath("json", s.JSON)}
	errs = append(errs, validPath("json_count", s.JSONCount))
	for i, a := range s.JSONAliases {
		if a == "" {
			errs = append(errs, fmt.Errorf("json_aliases[%d]: is empty", i))
			continue
		}
		errs = append(errs, validPath(fmt.Sprintf("json_aliases[%d]", i), a))
	}
	return errors.Join(errs...)
}

// FromRequest reads the units r asks to reserve.
//
// JSON: the body is read until its JSON value ends, at most maxPrefix
// bytes (DefaultMaxPrefix when 0 or negative), and r.Body is replaced by
// a reader that returns those bytes and then the rest of the original
// body, so the upstream receives the body byte for byte (r.ContentLength
// is unchanged, and still right). The field counts as present when the
// body is one JSON value that ends within maxPrefix bytes and holds a
// non-null value at the path. A body that is not JSON, is longer, lacks
// the field, or is content-coded (a Content-Encoding other than identity,
// not read at all) states nothing; so does one that decoders may read
// different values from: a second value after the first, a key of the
// path repeated, or a key equal to one of the path only in another case
// (which Go's encoding/json takes for the field): found is false, and the header is not
// looked at, since the upstream reads the body and a header could state a
// smaller reservation than the body asks it for (the gateway reserves its
// max when found is false and src has JSON).
//
// Header: for a request without a body, or when src has no JSON; present
// when the request has the field, even with an empty value. The field is
// read as the upstream receives it behind a proxy: under every spelling
// that is the same name ignoring case and reading "_" as "-" (CGI, WSGI
// and Rack turn X_Max_Tokens and X-Max-Tokens into one variable), and not
// where the request's Connection header names it (a proxy removes such a
// field, so the upstream never sees it). A field that repeats, in one
// spelling or several, is malformed: servers and frameworks read the
// first, the last or all values joined, so the upstream may act on
// another than the gateway would reserve.
//
// It returns found=false when no source is present; an error wrapping
// ErrMalformed when the first present source does not hold a usage (a
// negative, fractional or too large number, a string, ...); and an error
// wrapping the read error when reading the body failed (such as an
// *http.MaxBytesError), in which case the body must not be forwarded.
func FromRequest(r *http.Request, src RequestSource, maxPrefix int64) (units uint64, found bool, err error) {
	units, found, _, err = FromRequestWithin(r, src, maxPrefix, nil)
	return units, found, err
}

// ErrOverBudget is wrapped by FromRequestWithin's error when the body's
// prefix could not be held within the budget: r.Body then returns the
// bytes read so far and the rest, as after any read, and nothing is found.
// A gateway forwards the body and reserves as for a body that states
// nothing.
var ErrOverBudget = errors.New("the request body cannot be buffered within the gateway's budget")

// FromRequestWithin is FromRequest with the bytes of the body it holds in
// memory taken from budget (nil: no budget): before the buffer grows by n
// bytes, n are taken, and when they cannot be, reading stops with
// ErrOverBudget. held is what was taken, to be given back (Budget.Give)
// once the request no longer needs its body (the buffer backs r.Body
// until then), whatever the error.
//
// A body is read only when its Content-Type is JSON (application/json or
// any application/*+json, parameters aside) or absent: a form, multipart
// or any other type states nothing, since an upstream that parses it so
// reads other fields than a JSON reading would find (a form field
// "&max_tokens=30000&" inside a JSON string).
func FromRequestWithin(r *http.Request, src RequestSource, maxPrefix int64, budget *Budget) (units uint64, found bool, held int64, err error) {
	units, found, _, held, err = FromRequestLabeled(r, src, Label{}, maxPrefix, budget)
	return units, found, held, err
}

// MaxLabelLen is the longest value of a Label, in bytes.
const MaxLabelLen = 64

// Label classifies a request by a string it states: which of Values the
// string at the dotted path JSON of its JSON body, or its header Header
// (when JSON is empty), equals, ASCII case-insensitively.
type Label struct {
	JSON   string
	Header string
	// Values are the values that count; any other is Other.
	Values []string
}

// Other is the label of a request whose value is none of Label.Values:
// absent, null, not a string, longer than MaxLabelLen, stated
// ambiguously (a key repeated, or equal to one of the path only in
// another case; a header repeated), or in a body the gateway does not
// read (content-coded, not JSON, longer than maxPrefix, past the budget).
const Other = -1

// match returns the index of v in l.Values, compared ASCII
// case-insensitively, or Other.
func match[T string | []byte](l Label, v T) int {
next:
	for i, want := range l.Values {
		if len(want) != len(v) {
			continue
		}
		for j := range len(v) {
			if lowerASCII(want[j]) != lowerASCII(v[j]) {
				continue next
			}
		}
		return i
	}
	return Other
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// FromRequestLabeled is FromRequestWithin that also reads label (its zero
// value reads nothing): value is the index in label.Values of the value
// the request states, or Other. A JSON label is read in the same pass of
// the same buffered body prefix as the reservation, under the same
// rules, and a body is read for it even when src reads none; a label
// that is not a string is Other, never an error.
func FromRequestLabeled(r *http.Request, src RequestSource, label Label, maxPrefix int64, budget *Budget) (units uint64, found bool, value int, held int64, err error) {
	value = Other
	if label.JSON == "" && label.Header != "" {
		if vs := forwardedValues(r.Header, label.Header); len(vs) == 1 {
			value = match(label, vs[0])
		}
	}
	if maxPrefix <= 0 {
		maxPrefix = DefaultMaxPrefix
	}
	p, perr := parsePath(src.JSON)
	lp, lerr := parsePath(label.JSON)
	if (perr == nil || lerr == nil) && hasBody(r) {
		if !identity(r.Header) || !jsonType(r.Header) {
			return 0, false, value, 0, nil
		}
		// Backing arrays for the common source (a limit, an alias, a
		// count, a label), so that listing their paths allocates nothing.
		var pathBuf [4]path
		var nameBuf [4]string
		paths, names := pathBuf[:0], nameBuf[:0]
		if perr == nil {
			paths, names = append(paths, p), append(names, src.JSON)
			for _, a := range src.JSONAliases {
				if ap, aerr := parsePath(a); aerr == nil {
					paths, names = append(paths, ap), append(names, a)
				}
			}
		}
		limits := len(paths)
		if cp, cerr := parsePath(src.JSONCount); cerr == nil && perr == nil {
			paths, names = append(paths, cp), append(names, src.JSONCount)
		}
		lab := -1
		if lerr == nil {
			lab = len(paths)
			paths, names = append(paths, lp), append(names, label.JSON)
		}
		res, n, at, value, held, err := jsonPrefix(r, paths, limits, lab, label, maxPrefix, budget)
		switch {
		case errors.Is(err, ErrOverBudget):
			return 0, false, Other, held, fmt.Errorf("usage: %w", err)
		case err != nil:
			return 0, false, Other, held, fmt.Errorf("usage: reading the request body: %w", err)
		case res == resFound:
			return n, true, value, held, nil
		case res == resInvalid:
			return 0, false, value, held, fmt.Errorf("usage: request body field %s: %w", names[at], ErrMalformed)
		}
		return 0, false, value, held, nil
	}
	if src.Header == "" {
		return 0, false, value, 0, nil
	}
	vs := forwardedValues(r.Header, src.Header)
	if len(vs) == 0 {
		return 0, false, value, 0, nil
	}
	if len(vs) > 1 {
		return 0, false, value, 0, fmt.Errorf("usage: request header %s stated %d times: %w", src.Header, len(vs), ErrMalformed)
	}
	n, ok := parseUnits(vs[0])
	if !ok {
		return 0, false, value, 0, fmt.Errorf("usage: request header %s: %w", src.Header, ErrMalformed)
	}
	return n, true, value, 0, nil
}

// jsonType reports whether a request with header h may carry JSON: its
// Content-Type is absent, application/json, or application/<x>+json,
// in any case, with or without parameters. A Content-Type stated twice
// (the upstream may read either) is not JSON.
func jsonType(h http.Header) bool {
	var vs []string
	for k, v := range h {
		if headername.Equal(k, "content-type") {
			if vs != nil {
				return false
			}
			vs = v
		}
	}
	switch len(vs) {
	case 0:
		return true
	case 1:
	default:
		return false
	}
	t := vs[0]
	if i := strings.IndexByte(t, ';'); i >= 0 {
		t = t[:i]
	}
	t = textproto.TrimString(t)
	const app = "application/"
	if len(t) <= len(app) || !strings.EqualFold(t[:len(app)], app) {
		return false
	}
	sub := t[len(app):]
	if strings.EqualFold(sub, "json") {
		return true
	}
	return len(sub) > len("+json") && strings.EqualFold(sub[len(sub)-len("+json"):], "+json") &&
		!strings.ContainsAny(sub, " \t/")
}

// forwardedValues returns the values of the field name in h that an
// upstream behind a proxy may read as name: those of every field whose
// name is name ignoring ASCII case and reading "_" as "-", except a field
// the Connection header names (hop-by-hop: the proxy removes it). It does
// not allocate when one field matches.
func forwardedValues(h http.Header, name string) []string {
	var vs []string
	copied := false
	for k, v := range h {
		if len(k) != len(name) || !headername.Same(k, name) || len(v) == 0 || listedInConnection(h["Connection"], k) {
			continue
		}
		switch {
		case vs == nil:
			vs = v
		case !copied:
			vs, copied = append(append([]string(nil), vs...), v...), true
		default:
			vs = append(vs, v...)
		}
	}
	return vs
}

// listedInConnection reports whether one of the comma-separated names in
// the Connection values conn is the field k (canonical), as a proxy that
// deletes each of them with Header.Del would find it.
func listedInConnection(conn []string, k string) bool {
	for _, v := range conn {
		for name := range strings.SplitSeq(v, ",") {
			name = textproto.TrimString(name)
			if len(name) == len(k) && strings.EqualFold(name, k) && textproto.CanonicalMIMEHeaderKey(name) == k {
				return true
			}
		}
	}
	return false
}

// hasBody reports whether r has a body to read (a server's request with
// Content-Length 0 has none; a chunked one may turn out empty).
func hasBody(r *http.Request) bool {
	return r.Body != nil && r.Body != http.NoBody
}

// jsonPrefix reads r's body to its end, at most limit bytes, puts what
// it read back in front of the rest, and returns the value at the paths
// ps, of which the first limits name the limit and the one after them,
// if any, a count that multiplies it: resAbsent unless the body is one
// JSON value (whitespace may follow) that ends within limit bytes and
// states every path at most once (see strictKeys); else resInvalid when
// a path holds a value that is not a usage (at is its index), else the
// largest usage found at a limit path times the count (at most
// MaxUnits). The body is read past its value because an upstream may
// read more than the first value (a stream of JSON values), and one that
// is not one value states nothing the gateway can rely on.
func jsonPrefix(r *http.Request, ps []path, limits, labelAt int, label Label, limit int64, budget *Budget) (res uint8, units uint64, at, value int, held int64, err error) {
	value = Other
	var one [1]scanner
	scs := one[:]
	if len(ps) > 1 {
		scs = make([]scanner, len(ps))
	}
	for i := range scs {
		scs[i].reset(ps[i], limit)
		scs[i].strictKeys()
		if i == labelAt {
			scs[i].wantString()
		}
	}
	sc := &scs[0] // every scanner reads the same bytes: they fail alike
	size := int64(4 << 10)
	if r.ContentLength >= 0 {
		size = min(r.ContentLength+1, 64<<10) // grows as the body goes on; +1 for its end
	}
	// Up to limit+1 bytes: the scan fails at the byte past limit.
	size = min(size, limit+1)
	if !budget.take(size) {
		return resAbsent, 0, 0, value, 0, ErrOverBudget
	}
	held = size
	buf := make([]byte, 0, size)
	eof := false
	for !sc.failed() {
		if len(buf) == cap(buf) {
			// Grow by doubling, up to limit+1, each growth taken from the
			// budget first (the old buffer becomes garbage).
			grown := min(2*int64(cap(buf)), limit+1)
			if !budget.take(grown) {
				err = ErrOverBudget
				break
			}
			budget.Give(int64(cap(buf)))
			held = grown
			buf = append(make([]byte, 0, grown), buf...)
		}
		n, rerr := r.Body.Read(buf[len(buf):cap(buf)])
		for i := range scs {
			scs[i].feed(buf[len(buf) : len(buf)+n])
		}
		buf = buf[:len(buf)+n]
		if rerr == io.EOF {
			eof = true
			break
		}
		if rerr != nil {
			err = rerr
			break
		}
	}
	r.Body = &prefixed{Reader: io.MultiReader(bytes.NewReader(buf), r.Body), body: r.Body}
	if err != nil || !eof {
		return resAbsent, 0, 0, value, held, err
	}
	res, count := resAbsent, uint64(1)
	if labelAt >= 0 {
		if r, _, _ := scs[labelAt].end(); r == resString {
			value = match(label, scs[labelAt].str[:scs[labelAt].strN])
		}
	}
	for i := range scs {
		if i == labelAt {
			continue
		}
		r, n, _ := scs[i].end()
		switch {
		case scs[i].ambiguous:
			return resAbsent, 0, 0, value, held, nil
		case r == resInvalid:
			if res != resInvalid {
				res, at = resInvalid, i
			}
		case r != resFound:
		case i >= limits:
			count = max(n, 1)
		case res != resInvalid:
			res, units = resFound, max(units, n)
		}
	}
	if res == resFound {
		units = mulUnits(units, count)
	}
	return res, units, at, value, held, nil
}

// mulUnits returns a × b, or MaxUnits when that is more.
func mulUnits(a, b uint64) uint64 {
	if b != 0 && a > MaxUnits/b {
		return MaxUnits
	}
	return min(a*b, MaxUnits)
}

// prefixed is a request body whose first bytes were read ahead.
type prefixed struct {
	io.Reader
	body io.ReadCloser
}

func (p *prefixed) Close() error { return p.body.Close() }
