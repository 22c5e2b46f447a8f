package config

import (
	"reflect"
	"strings"
)

// decodeKey decodes a policy's lease: the word auto (`lease: auto`, a
// Lease with Auto set and the other fields at their defaults), or a
// mapping whose absent max_block defaults to 50 unless auto is set (an
// auto lease has no bound of its own by default).
func (p *Policy) decodeKey(d *decoder, path, key string, in any) bool {
	if key != "lease" {
		return false
	}
	l := &Lease{}
	l.setDefaults()
	switch v := in.(type) {
	case string:
		if !strings.EqualFold(strings.TrimSpace(v), "auto") {
			d.fail(path, `must be "auto" or a mapping (auto, max_block, ttl, instances), got "`+v+`"`)
			return true
		}
		l.Auto = true
	case map[string]any:
		d.decode(path, in, reflect.ValueOf(l).Elem())
		if _, set := v["max_block"]; !set && !l.Auto {
			l.MaxBlock = 50
		}
	default:
		return false // the decoder reports the wrong shape
	}
	p.Lease = l
	return true
}
