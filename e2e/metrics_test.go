package e2e

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// sample is one line of the Prometheus text exposition.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

type samples []sample

// parseMetrics reads the Prometheus text format: comment lines are skipped,
// every other line is `name{k="v",...} value [timestamp]`.
func parseMetrics(r io.Reader) (samples, error) {
	var out samples
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		s, err := parseSample(line)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, sc.Err()
}

func parseSample(line string) (sample, error) {
	s := sample{labels: map[string]string{}}
	rest := line
	if i := strings.IndexAny(line, "{ "); i >= 0 && line[i] == '{' {
		s.name = line[:i]
		j := strings.LastIndexByte(line, '}')
		if j < i {
			return s, fmt.Errorf("metrics: unterminated labels in %q", line)
		}
		if err := parseLabels(line[i+1:j], s.labels); err != nil {
			return s, fmt.Errorf("metrics: %q: %w", line, err)
		}
		rest = strings.TrimSpace(line[j+1:])
	} else {
		name, v, ok := strings.Cut(line, " ")
		if !ok {
			return s, fmt.Errorf("metrics: no value in %q", line)
		}
		s.name, rest = name, strings.TrimSpace(v)
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return s, fmt.Errorf("metrics: no value in %q", line)
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return s, fmt.Errorf("metrics: value in %q: %w", line, err)
	}
	s.value = v
	return s, nil
}

// parseLabels parses `k="v",k2="v2"` with the exposition format's escapes.
func parseLabels(text string, into map[string]string) error {
	for text != "" {
		eq := strings.IndexByte(text, '=')
		if eq < 0 || eq+1 >= len(text) || text[eq+1] != '"' {
			return fmt.Errorf("malformed label list %q", text)
		}
		key := strings.TrimSpace(text[:eq])
		var val strings.Builder
		i := eq + 2
		for ; i < len(text) && text[i] != '"'; i++ {
			if text[i] == '\\' && i+1 < len(text) {
				i++
				switch text[i] {
				case 'n':
					val.WriteByte('\n')
				default:
					val.WriteByte(text[i])
				}
				continue
			}
			val.WriteByte(text[i])
		}
		if i >= len(text) {
			return fmt.Errorf("unterminated label value in %q", text)
		}
		into[key] = val.String()
		text = strings.TrimLeft(text[i+1:], ", ")
	}
	return nil
}

// sum adds the values of the samples called name whose labels include every
// "k=v" of want.
func (ss samples) sum(name string, want ...string) float64 {
	var total float64
next:
	for _, s := range ss {
		if s.name != name {
			continue
		}
		for _, kv := range want {
			k, v, _ := strings.Cut(kv, "=")
			if s.labels[k] != v {
				continue next
			}
		}
		total += s.value
	}
	return total
}
