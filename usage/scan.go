package usage

import "unicode/utf8"

// scanner is an incremental JSON parser that validates one JSON value fed
// to it in pieces and remembers the value at one path. It holds no input:
// its memory is its fields plus one byte per level of nesting.
type scanner struct {
	path  path
	limit int64 // most bytes accepted; more is an error
	fed   int64

	state uint8
	stack []byte // '{' or '[' per open container
	// on is how many of the open containers, from the top level down, lie
	// on the path: the top-level object, then the object under the path's
	// first key, and so on.
	on    int
	small [32]byte // backing array of stack for shallow documents

	// The value being scanned is the one at the path (target), or an
	// object that continues the path (onPath).
	target, onPath bool

	// key matching: the key being read may match path.seg(len(stack)-1)
	// (keyCand); keyOK and keyPos track the comparison so far.
	inKey, keyCand, keyOK bool
	keyPos                int
	keySeg                string // the path's key at this depth, when keyCand

	uniN int  // hex digits of a \u escape read so far
	uni  rune // its value so far

	numPhase uint8
	numPlain bool // digits only so far
	numOver  bool // above MaxUnits
	numVal   uint64

	lit  string // the literal being matched
	litI int

	// result: the value at the path, last occurrence wins
	res   uint8
	units uint64

	// strict (see strictKeys) makes a path that the input may state
	// more than once ambiguous: fold tracks the keys that equal the
	// path's only under case folding, hits counts the keys matched on
	// the path.
	strict    bool
	ambiguous bool
	hits      int
	fold      keyFold

	// strings (see wantString) makes a string at the path a result
	// (resString), its decoded bytes held in str[:strN]; strN is -1 once
	// it is longer than str.
	strings bool
	str     [MaxLabelLen]byte
	strN    int
}

// wantString makes s take a string at its path for a result (resString)
// in place of a usage; any other value there is resInvalid.
func (s *scanner) wantString() { s.strings = true }

// strByte adds a decoded byte of the string at the path.
func (s *scanner) strByte(c byte) {
	if s.strN < 0 {
		return
	}
	if s.strN == len(s.str) {
		s.strN = -1
		return
	}
	s.str[s.strN] = c
	s.strN++
}

// capturing reports whether the string being read is the one at the path
// of a scanner that wants strings.
func (s *scanner) capturing() bool { return s.strings && s.target && !s.inKey }

// Results of a scan at its path.
const (
	resAbsent  uint8 = iota // no value at the path, or null
	resFound                // a usage (see parseUnits' rules)
	resInvalid              // a value that is not a usage
	resString               // a string, for a scanner that wants one
)

// Scanner states.
const (
	sValue    uint8 = iota // a value is expected
	sArrFirst              // after '[': a value or ']'
	sObjFirst              // after '{': a key or '}'
	sKey                   // after ',' in an object: a key
	sColon                 // after a key: ':'
	sAfter                 // after a value in a container: ',' or the close
	sString
	sEscape
	sUnicode
	sNumber
	sLiteral
	sEnd   // after the top-level value: only whitespace
	sError // invalid, too deep, or over the limit: nothing more is read
)

// Number phases (RFC 8259 grammar).
const (
	nMinus    uint8 = iota // after '-'
	nZero                  // a leading 0
	nInt                   // integer digits
	nDot                   // after '.'
	nFrac                  // fraction digits
	nExp                   // after 'e'
	nExpSign               // after the exponent's sign
	nExpDigit              // exponent digits
)

// maxDepth bounds nesting, as encoding/json does.
const maxDepth = 10000

// reset prepares s for a new value at p, accepting at most limit bytes.
func (s *scanner) reset(p path, limit int64) {
	stack := s.stack
	if stack == nil {
		stack = s.small[:0]
	}
	*s = scanner{path: p, limit: limit, stack: stack[:0]}
}

// failed reports whether the input is already known not to be one valid
// JSON value within the limit.
func (s *scanner) failed() bool { return s.state == sError }

// strStop marks the bytes that end a run of plain string content.
var strStop = func() (t [256]bool) {
	for c := range 0x20 {
		t[c] = true
	}
	t['"'], t['\\'] = true, true
	return t
}()

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// feed scans the next piece of input.
func (s *scanner) feed(p []byte) {
	if s.state == sError {
		return
	}
	s.fed += int64(len(p))
	if s.fed > s.limit {
		s.state = sError
		return
	}
	for i := 0; i < len(p); {
		c := p[i]
		switch s.state {
		case sError:
			return
		case sString:
			// the run of plain bytes up to a quote, backslash or control
			j := i
			for j < len(p) && !strStop[p[j]] {
				j++
			}
			if s.inKey && s.keyCand && (s.keyOK || s.fold.ok) {
				s.keyRun(p[i:j])
			}
			if s.capturing() {
				for _, b := range p[i:j] {
					s.strByte(b)
				}
			}
			if j == len(p) {
				return
			}
			switch c = p[j]; {
			case c == '"':
				s.endString()
			case c == '\\':
				s.state = sEscape
			default:
				s.state = sError
				return
			}
			i = j + 1
		case sEscape:
			var d byte
			switch c {
			case '"', '\\', '/':
				d = c
			case 'b':
				d = '\b'
			case 'f':
				d = '\f'
			case 'n':
				d = '\n'
			case 'r':
				d = '\r'
			case 't':
				d = '\t'
			case 'u':
				s.state, s.uniN, s.uni = sUnicode, 0, 0
				i++
				continue
			default:
				s.state = sError
				return
			}
			s.keyByte(d)
			if s.capturing() {
				s.strByte(d)
			}
			s.state = sString
			i++
		case sUnicode:
			v, ok := hexVal(c)
			if !ok {
				s.state = sError
				return
			}
			s.uni = s.uni<<4 | rune(v)
			s.uniN++
			if s.uniN == 4 {
				s.keyRune(s.uni)
				if s.capturing() {
					s.strRune(s.uni)
				}
				s.state = sString
			}
			i++
		case sNumber:
			if s.numByte(c) {
				i++
				continue
			}
			if !s.endNumber() {
				return
			}
			// c is not part of the number: scan it in the new state
		case sLiteral:
			if c != s.lit[s.litI] {
				s.state = sError
				return
			}
			s.litI++
			if s.litI == len(s.lit) {
				s.endScalar(resInvalid)
				if s.lit == "null" && s.target {
					s.res = resAbsent
				}
				s.afterValue()
			}
			i++
		default:
			if isSpace(c) {
				i++
				continue
			}
			s.structural(c)
			i++
		}
	}
}

// structural scans c, not whitespace, in one of the states between tokens.
func (s *scanner) structural(c byte) {
	switch s.state {
	case sValue:
		s.beginValue(c)
	case sArrFirst:
		if c == ']' {
			s.close(c)
			return
		}
		s.beginValue(c)
	case sObjFirst, sKey:
		if c == '}' && s.state == sObjFirst {
			s.close(c)
			return
		}
		if c != '"' {
			s.state = sError
			return
		}
		d := len(s.stack)
		s.inKey = true
		s.keyCand = s.on == d && d <= s.path.n
		s.keyOK, s.keyPos = true, 0
		if s.keyCand {
			s.keySeg = s.path.seg(d - 1)
			s.fold = keyFold{ok: s.strict}
		}
		s.state = sString
	case sColon:
		if c != ':' {
			s.state = sError
			return
		}
		s.state = sValue
	case sAfter:
		switch c {
		case ',':
			if s.stack[len(s.stack)-1] == '{' {
				s.state = sKey
			} else {
				s.state = sValue
			}
		case '}', ']':
			s.close(c)
		default:
			s.state = sError
		}
	default: // sEnd
		s.state = sError
	}
}

// beginValue starts the value whose first byte is c.
func (s *scanner) beginValue(c byte) {
	switch {
	case c == '{' || c == '[':
		if len(s.stack) == maxDepth {
			s.state = sError
			return
		}
		onPath := c == '{' && (len(s.stack) == 0 || s.onPath)
		if s.target {
			s.res = resInvalid
		}
		s.target, s.onPath = false, false
		s.stack = append(s.stack, c)
		if onPath {
			s.on = len(s.stack)
		}
		if c == '{' {
			s.state = sObjFirst
		} else {
			s.state = sArrFirst
		}
	case c == '"':
		if s.target && !s.strings {
			s.res = resInvalid
		}
		if s.target { // a later string elsewhere keeps the one at the path
			s.strN = 0
		}
		s.inKey = false
		s.state = sString
	case c == '-' || (c >= '0' && c <= '9'):
		s.state = sNumber
		s.numPlain, s.numOver, s.numVal = c != '-', false, 0
		switch c {
		case '-':
			s.numPhase = nMinus
		case '0':
			s.numPhase = nZero
		default:
			s.numPhase = nInt
			s.numVal = uint64(c - '0')
		}
	case c == 't':
		s.state, s.lit, s.litI = sLiteral, "true", 1
	case c == 'f':
		s.state, s.lit, s.litI = sLiteral, "false", 1
	case c == 'n':
		s.state, s.lit, s.litI = sLiteral, "null", 1
	default:
		s.state = sError
	}
}

// close ends the innermost container with c ('}' or ']').
func (s *scanner) close(c byte) {
	top := s.stack[len(s.stack)-1]
	if (c == '}') != (top == '{') {
		s.state = sError
		return
	}
	s.stack = s.stack[:len(s.stack)-1]
	s.on = min(s.on, len(s.stack))
	s.afterValue()
}

// afterValue moves to the state that follows a complete value.
func (s *scanner) afterValue() {
	s.target, s.onPath = false, false
	if len(s.stack) == 0 {
		s.state = sEnd
	} else {
		s.state = sAfter
	}
}

// endScalar records r as the result if the scalar just read is at the path.
func (s *scanner) endScalar(r uint8) {
	if s.target {
		s.res = r
	}
}

// endString ends a key or a string value.
func (s *scanner) endString() {
	if !s.inKey {
		switch {
		case s.capturing() && s.strN >= 0:
			s.res = resString
		default:
			s.endScalar(resInvalid)
		}
		s.afterValue()
		return
	}
	s.inKey = false
	s.state = sColon
	d := len(s.stack)
	exact := s.keyCand && s.keyOK && s.keyPos == len(s.keySeg)
	if s.strict && (exact || s.keyCand && s.fold.matched(s.keySeg)) {
		s.hits++
		if !exact || s.hits > s.path.n {
			s.ambiguous = true
		}
	}
	if !exact {
		return
	}
	// A later occurrence of a key on the path replaces what an earlier
	// one held.
	s.res, s.units = resAbsent, 0
	if d == s.path.n {
		s.target = true
	} else {
		s.onPath = true
	}
}

// keyByte compares the next decoded byte of a key with the path.
func (s *scanner) keyByte(c byte) {
	if !s.inKey || !s.keyCand {
		return
	}
	if s.fold.ok {
		s.fold.byte(c, s.keySeg)
	}
	if !s.keyOK {
		return
	}
	if s.keyPos < len(s.keySeg) && s.keySeg[s.keyPos] == c {
		s.keyPos++
		return
	}
	s.keyOK = false
}

// keyRun compares the next plain bytes of a key with the path.
func (s *scanner) keyRun(run []byte) {
	if s.fold.ok {
		for _, c := range run {
			s.fold.byte(c, s.keySeg)
		}
	}
	if !s.keyOK {
		return
	}
	end := s.keyPos + len(run)
	if end <= len(s.keySeg) && string(run) == s.keySeg[s.keyPos:end] {
		s.keyPos = end
		return
	}
	s.keyOK = false
}

// keyRune compares a \u escape of a key with the path. A surrogate (half
// of an escaped pair) never matches.
func (s *scanner) keyRune(r rune) {
	if !s.inKey || !s.keyCand {
		return
	}
	if r >= 0xD800 && r < 0xE000 {
		s.keyOK, s.fold.ok = false, false
		return
	}
	var b [utf8.UTFMax]byte
	n := utf8.EncodeRune(b[:], r)
	for _, c := range b[:n] {
		s.keyByte(c)
	}
}

// strRune adds a \u escape to the string at the path; a surrogate (half
// of an escaped pair) makes it one that matches no label (too long).
func (s *scanner) strRune(r rune) {
	if r >= 0xD800 && r < 0xE000 {
		s.strN = -1
		return
	}
	var b [utf8.UTFMax]byte
	n := utf8.EncodeRune(b[:], r)
	for _, c := range b[:n] {
		s.strByte(c)
	}
}

// numByte scans c as part of a number and reports whether it was one.
func (s *scanner) numByte(c byte) bool {
	digit := c >= '0' && c <= '9'
	switch s.numPhase {
	case nMinus:
		if !digit {
			return false
		}
		if c == '0' {
			s.numPhase = nZero
		} else {
			s.numPhase = nInt
		}
	case nZero, nInt:
		switch {
		case digit && s.numPhase == nInt:
			if !s.numOver {
				s.numVal = s.numVal*10 + uint64(c-'0')
				s.numOver = s.numVal > MaxUnits
			}
		case c == '.':
			s.numPhase, s.numPlain = nDot, false
		case c == 'e' || c == 'E':
			s.numPhase, s.numPlain = nExp, false
		default:
			return false
		}
	case nDot, nFrac:
		switch {
		case digit:
			s.numPhase = nFrac
		case s.numPhase == nFrac && (c == 'e' || c == 'E'):
			s.numPhase = nExp
		default:
			return false
		}
	case nExp:
		switch {
		case digit:
			s.numPhase = nExpDigit
		case c == '+' || c == '-':
			s.numPhase = nExpSign
		default:
			return false
		}
	case nExpSign, nExpDigit:
		if !digit {
			return false
		}
		s.numPhase = nExpDigit
	}
	return true
}

// endNumber ends a number at the first byte that is not part of it (or at
// the end of input) and reports whether it was a valid number.
func (s *scanner) endNumber() bool {
	switch s.numPhase {
	case nZero, nInt, nFrac, nExpDigit:
	default:
		s.state = sError
		return false
	}
	if s.target {
		if s.numPlain && !s.numOver {
			s.res, s.units = resFound, s.numVal
		} else {
			s.res = resInvalid
		}
	}
	s.afterValue()
	return true
}

// end ends the input and returns the result at the path; valid is false
// when the input was not exactly one JSON value (within the limit).
func (s *scanner) end() (res uint8, units uint64, valid bool) {
	if s.state == sNumber {
		s.endNumber()
	}
	if s.state != sEnd {
		return resAbsent, 0, false
	}
	if s.ambiguous {
		return resAbsent, 0, true
	}
	return s.res, s.units, true
}

func hexVal(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
