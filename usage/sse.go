package usage

import "bytes"

// sseParser reads a text/event-stream (the WHATWG HTML "server-sent
// events" format) as it passes and remembers the usage of the last event
// whose data, parsed as JSON, carries one at the path. Lines end with CRLF,
// LF or CR; an event ends with a blank line; its data is the values of its
// data fields joined with LF. An event still open when the stream ends is
// not dispatched, as the format says.
type sseParser struct {
	path  path
	limit int64 // most data bytes of one event that are parsed

	phase   uint8
	lastCR  bool // the previous byte ended a line with CR
	started bool // the first line has begun (a BOM may precede it)
	name    [8]byte
	nameLen int // bytes of the field name so far; more than len(name): too long

	hasData bool // the current event has a data field
	event   scanner

	found bool
	units uint64
}

// Phases of the current line.
const (
	lStart  uint8 = iota // nothing of the line read yet
	lName                // in the field name
	lColon               // right after "data:" (a space may follow)
	lData                // in a data field's value
	lIgnore              // a comment or another field: skipped
)

const bom = "\xEF\xBB\xBF"

var lf = []byte{'\n'}

func (p *sseParser) reset(pa path, limit int64) {
	ev := p.event
	*p = sseParser{path: pa, limit: limit, event: ev}
	p.event.reset(pa, limit)
}

// feed parses the next piece of the stream.
func (p *sseParser) feed(b []byte) {
	for i := 0; i < len(b); {
		c := b[i]
		if p.lastCR {
			p.lastCR = false
			if c == '\n' {
				i++
				continue
			}
		}
		if c == '\n' || c == '\r' {
			p.endLine()
			p.lastCR = c == '\r'
			i++
			continue
		}
		switch p.phase {
		case lStart:
			if c == ':' {
				p.phase = lIgnore
			} else {
				p.phase, p.nameLen = lName, 0
				continue // read c as the name's first byte
			}
		case lName:
			if c == ':' {
				if p.isData() {
					p.dataLine()
					p.phase = lColon
				} else {
					p.phase = lIgnore
				}
			} else {
				if p.nameLen < len(p.name) {
					p.name[p.nameLen] = c
				}
				p.nameLen++
			}
		case lColon:
			p.phase = lData
			if c == ' ' {
				break
			}
			continue // c is the value's first byte
		case lData:
			j := i + lineEnd(b[i:])
			p.event.feed(b[i:j])
			i = j
			continue
		case lIgnore:
			i += lineEnd(b[i:])
			continue
		}
		i++
	}
}

// lineEnd returns the index of the first CR or LF in b, or len(b).
func lineEnd(b []byte) int {
	n := bytes.IndexByte(b, '\n')
	if n < 0 {
		n = len(b)
	}
	if r := bytes.IndexByte(b[:n], '\r'); r >= 0 {
		return r
	}
	return n
}

// isData reports whether the field name read is "data" (after a BOM on
// the stream's first line).
func (p *sseParser) isData() bool {
	if p.nameLen > len(p.name) {
		return false
	}
	n := p.name[:p.nameLen]
	if !p.started {
		n = bytes.TrimPrefix(n, []byte(bom))
	}
	return string(n) == "data"
}

// dataLine starts a data field's value: values of one event are joined
// with LF.
func (p *sseParser) dataLine() {
	if p.hasData {
		p.event.feed(lf)
	}
	p.hasData = true
}

func (p *sseParser) endLine() {
	switch p.phase {
	case lStart:
		p.dispatch()
	case lName:
		if p.isData() { // "data" alone: an empty value
			p.dataLine()
		}
	}
	p.phase = lStart
	p.started = true
}

// dispatch ends an event: a usage in its data replaces the one before.
func (p *sseParser) dispatch() {
	if p.hasData {
		if res, units, _ := p.event.end(); res == resFound {
			p.found, p.units = true, units
		}
	}
	p.hasData = false
	p.event.reset(p.path, p.limit)
}
