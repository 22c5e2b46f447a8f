package redisstore

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

var respCases = []struct {
	name    string
	stream  string
	lim     ReplyLimits
	replies int64 // replies completed; -1: the stream is refused
}{
	{"simple string", "+OK\r\n", ReplyLimits{}, 1},
	{"error", "-ERR unknown command\r\n", ReplyLimits{}, 1},
	{"integer", ":-42\r\n", ReplyLimits{}, 1},
	{"bulk", "$5\r\nhello\r\n", ReplyLimits{}, 1},
	{"empty bulk", "$0\r\n\r\n", ReplyLimits{}, 1},
	{"bulk holding CRLF", "$4\r\n\r\n\r\n\r\n", ReplyLimits{}, 1},
	{"null bulk", "$-1\r\n", ReplyLimits{}, 1},
	{"null array", "*-1\r\n", ReplyLimits{}, 1},
	{"empty array", "*0\r\n", ReplyLimits{}, 1},
	{"array", "*3\r\n:1\r\n$1\r\nx\r\n+y\r\n", ReplyLimits{}, 1},
	{"nested", "*2\r\n*2\r\n:1\r\n:2\r\n*1\r\n_\r\n", ReplyLimits{}, 1},
	{"resp3 scalars", "_\r\n#t\r\n,1.5\r\n(12345678901234567890\r\n", ReplyLimits{}, 4},
	{"map", "%2\r\n+a\r\n:1\r\n+b\r\n*1\r\n:2\r\n", ReplyLimits{}, 1},
	{"set and push", "~2\r\n:1\r\n:2\r\n>2\r\n+message\r\n+x\r\n", ReplyLimits{}, 2},
	{"verbatim and blob error", "=7\r\ntxt:abc\r\n!3\r\nERR\r\n", ReplyLimits{}, 2},
	{"attribute then its value", "|1\r\n+ttl\r\n:3\r\n$2\r\nok\r\n", ReplyLimits{}, 1},
	{"attribute inside an array", "*2\r\n|1\r\n+a\r\n+b\r\n:1\r\n:2\r\n", ReplyLimits{}, 1},
	{"empty attribute", "|0\r\n:1\r\n", ReplyLimits{}, 1},
	{"pipeline", strings.Repeat("*2\r\n:1\r\n:0\r\n", 100), ReplyLimits{}, 100},
	{"bulk at the bound", "$16\r\n0123456789abcdef\r\n", ReplyLimits{MaxReply: 16}, 1},
	{"budget is per reply", "$16\r\n0123456789abcdef\r\n$16\r\n0123456789abcdef\r\n", ReplyLimits{MaxReply: 16}, 2},
	{"depth at the bound", strings.Repeat("*1\r\n", 3) + ":1\r\n", ReplyLimits{MaxDepth: 3}, 1},

	{"huge bulk", "$2000000000\r\n", ReplyLimits{}, -1},
	{"huge array", "*2147483646\r\n", ReplyLimits{}, -1},
	{"huge map", "%1073741823\r\n", ReplyLimits{}, -1},
	{"huge set", "~100000000\r\n", ReplyLimits{}, -1},
	{"huge push", ">100000000\r\n", ReplyLimits{}, -1},
	{"huge attribute", "|100000000\r\n", ReplyLimits{}, -1},
	{"huge verbatim", "=100000000\r\n", ReplyLimits{}, -1},
	{"huge blob error", "!100000000\r\n", ReplyLimits{}, -1},
	{"length overflows int64", "$99999999999999999999\r\n", ReplyLimits{}, -1},
	{"bulk over the bound", "$17\r\n", ReplyLimits{MaxReply: 16}, -1},
	{"elements add up", "*1\r\n$9\r\n", ReplyLimits{MaxReply: 24}, -1},
	{"nested arrays add up", strings.Repeat("*1000\r\n", 2), ReplyLimits{MaxReply: 16000 + 15999}, -1},
	{"too deep", strings.Repeat("*1\r\n", 4), ReplyLimits{MaxDepth: 3}, -1},
	{"default depth", strings.Repeat("*1\r\n", 10000), ReplyLimits{}, -1},
	{"line too long", "+" + strings.Repeat("x", 100), ReplyLimits{MaxLine: 64}, -1},
	{"endless line", "+" + strings.Repeat("x", 70<<10), ReplyLimits{}, -1},
	{"negative bulk", "$-5\r\n", ReplyLimits{}, -1},
	{"negative map", "%-1\r\n", ReplyLimits{}, -1},
	{"no digits", "$\r\n", ReplyLimits{}, -1},
	{"letter in a length", "*1x\r\n", ReplyLimits{}, -1},
	{"CR without LF", "*1\rx", ReplyLimits{}, -1},
	{"streamed string", "$?\r\n", ReplyLimits{}, -1},
	{"unknown type", "@1\r\n", ReplyLimits{}, -1},
	{"garbage after a reply", "+OK\r\nHTTP/1.1 200 OK\r\n", ReplyLimits{}, -1},
}

// feedAll feeds stream to a new scanner in pieces cut at cuts (sorted
// offsets) and returns the scanner and its error.
func feedAll(lim ReplyLimits, stream []byte, cuts []int) (*respScanner, error) {
	s := newRESPScanner(lim)
	prev := 0
	for _, c := range append(cuts, len(stream)) {
		if c < prev || c > len(stream) {
			continue
		}
		if err := s.feed(stream[prev:c]); err != nil {
			return s, err
		}
		prev = c
	}
	return s, nil
}

func TestRESPScanner(t *testing.T) {
	for _, c := range respCases {
		t.Run(c.name, func(t *testing.T) {
			stream := []byte(c.stream)
			every := make([]int, len(stream))
			for i := range every {
				every[i] = i
			}
			for _, cuts := range [][]int{nil, every} {
				s, err := feedAll(c.lim, stream, cuts)
				if c.replies < 0 {
					if !errors.Is(err, ErrReplyBound) {
						t.Fatalf("cuts %d: err = %v, want ErrReplyBound", len(cuts), err)
					}
					continue
				}
				if err != nil {
					t.Fatalf("cuts %d: %v", len(cuts), err)
				}
				if s.replies != c.replies || s.state != stType || len(s.stack) != 0 || s.budget != 0 {
					t.Fatalf("cuts %d: replies %d (state %d, open %d, budget %d), want %d complete",
						len(cuts), s.replies, s.state, len(s.stack), s.budget, c.replies)
				}
			}
		})
	}
}

// TestRESPScannerRefusesBeforeTheData checks that a declaration over a
// bound is refused by the read that carries it, with none of its data.
func TestRESPScannerRefusesBeforeTheData(t *testing.T) {
	s := newRESPScanner(ReplyLimits{})
	if err := s.feed([]byte("*2\r\n:1\r\n$20000")); err != nil {
		t.Fatalf("prefix refused: %v", err)
	}
	if err := s.feed([]byte("000\r\n")); !errors.Is(err, ErrReplyBound) {
		t.Fatalf("the read completing $20000000 returned %v, want ErrReplyBound", err)
	}
}

// writeRESP appends a random RESP3 value of at most depth levels to b and
// returns the memory it declares as the scanner counts it.
func writeRESP(t *rapid.T, b *bytes.Buffer, depth int) int64 {
	kinds := []string{"+", "-", ":", "_", "#", ",", "(", "$", "=", "!", "$-1", "*-1"}
	if depth > 0 {
		kinds = append(kinds, "*", "~", ">", "%", "|")
	}
	switch k := rapid.SampledFrom(kinds).Draw(t, "kind"); k {
	case "+", "-", ":", "#", ",", "(":
		fmt.Fprintf(b, "%s%s\r\n", k, rapid.StringMatching(`[a-z0-9 .]{0,20}`).Draw(t, "line"))
	case "_", "$-1", "*-1":
		fmt.Fprintf(b, "%s\r\n", k)
	case "$", "=", "!":
		data := rapid.SliceOfN(rapid.Byte(), 0, 40).Draw(t, "data")
		fmt.Fprintf(b, "%s%d\r\n%s\r\n", k, len(data), data)
		return int64(len(data))
	default:
		n := rapid.IntRange(0, 4).Draw(t, "n")
		fmt.Fprintf(b, "%s%d\r\n", k, n)
		elems := n
		if k == "%" || k == "|" {
			elems *= 2
		}
		cost := int64(elems * elementCost)
		for range elems {
			cost += writeRESP(t, b, depth-1)
		}
		if k == "|" {
			cost += writeRESP(t, b, depth-1) // the annotated value
		}
		return cost
	}
	return 0
}

// TestRESPScannerAcceptsValidStreams generates streams of valid replies
// and checks that each is accepted, split anywhere, with every reply
// counted; and refused under a MaxReply just below its largest reply.
func TestRESPScannerAcceptsValidStreams(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var b bytes.Buffer
		n := rapid.IntRange(1, 5).Draw(t, "replies")
		var largest int64
		for range n {
			largest = max(largest, writeRESP(t, &b, 4))
		}
		stream := b.Bytes()
		cuts := rapid.SliceOfN(rapid.IntRange(0, len(stream)), 0, 8).Draw(t, "cuts")
		slices.Sort(cuts)
		s, err := feedAll(ReplyLimits{MaxReply: max(largest, 1)}, stream, cuts)
		if err != nil || s.replies != int64(n) {
			t.Fatalf("stream %q: replies %d err %v, want %d", stream, s.replies, err, n)
		}
		if largest > 1 {
			if _, err := feedAll(ReplyLimits{MaxReply: largest - 1}, stream, cuts); !errors.Is(err, ErrReplyBound) {
				t.Fatalf("stream %q under MaxReply %d: err %v, want ErrReplyBound", stream, largest-1, err)
			}
		}
	})
}

// FuzzRESPScanner checks that the scanner never panics and that how a
// stream is split into reads changes nothing: the same replies, and the
// same refusal.
func FuzzRESPScanner(f *testing.F) {
	for _, c := range respCases {
		f.Add([]byte(c.stream), uint64(len(c.stream)), uint16(64))
	}
	f.Fuzz(func(t *testing.T, stream []byte, seed uint64, maxReply uint16) {
		lim := ReplyLimits{MaxReply: int64(maxReply), MaxLine: 128, MaxDepth: 8}
		whole, werr := feedAll(lim, stream, nil)
		r := rand.New(rand.NewPCG(seed, 1))
		var cuts []int
		for i := 0; i < len(stream); i += 1 + r.IntN(8) {
			cuts = append(cuts, i)
		}
		split, serr := feedAll(lim, stream, cuts)
		if (werr == nil) != (serr == nil) || (werr != nil && werr.Error() != serr.Error()) {
			t.Fatalf("whole: %v; split: %v", werr, serr)
		}
		if werr == nil && (whole.replies != split.replies || whole.budget != split.budget || len(whole.stack) != len(split.stack)) {
			t.Fatalf("whole: %d replies, budget %d; split: %d replies, budget %d", whole.replies, whole.budget, split.replies, split.budget)
		}
		if whole.budget > lim.withDefaults().MaxReply || len(whole.stack) > lim.MaxDepth {
			t.Fatalf("bounds broken: budget %d, depth %d", whole.budget, len(whole.stack))
		}
	})
}

// TestRESPScannerAdmitsLargeClusterSlots builds the CLUSTER SLOTS reply of
// a Cluster whose 16384 slots are each a range of their own, served by a
// primary and two replicas with 40-character ids and hostnames in RESP3
// metadata maps: the worst fragmentation a real Cluster can have. It must
// pass under the default bounds, in one read and split into small ones.
func TestRESPScannerAdmitsLargeClusterSlots(t *testing.T) {
	var b bytes.Buffer
	const slots = 16384
	fmt.Fprintf(&b, "*%d\r\n", slots)
	node := func(i int) {
		ip := fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
		id := fmt.Sprintf("%040x", i)
		host := fmt.Sprintf("redis-%d.cache.internal", i)
		fmt.Fprintf(&b, "*4\r\n$%d\r\n%s\r\n:6379\r\n$%d\r\n%s\r\n%%1\r\n$8\r\nhostname\r\n$%d\r\n%s\r\n",
			len(ip), ip, len(id), id, len(host), host)
	}
	for s := range slots {
		fmt.Fprintf(&b, "*5\r\n:%d\r\n:%d\r\n", s, s)
		for r := range 3 {
			node(s*3 + r)
		}
	}
	stream := b.Bytes()
	var cuts []int
	for i := 0; i < len(stream); i += 4093 {
		cuts = append(cuts, i)
	}
	for _, c := range [][]int{nil, cuts} {
		s, err := feedAll(ReplyLimits{}, stream, c)
		if err != nil || s.replies != 1 {
			t.Fatalf("%d KiB CLUSTER SLOTS reply: replies %d, err %v", len(stream)>>10, s.replies, err)
		}
	}
	t.Logf("CLUSTER SLOTS of %d ranges x 3 nodes: %d KiB on the wire, within the %d MiB bound", slots, len(stream)>>10, defaultMaxReply>>20)
}

// BenchmarkRESPScanner measures the scanner on a pipeline of decision
// replies (a 1-item script reply: an array of 8 integers), fed in 4 KiB
// reads as the client's buffer would.
func BenchmarkRESPScanner(b *testing.B) {
	reply := "*8\r\n:1\r\n:1\r\n:9\r\n:0\r\n:100000\r\n:10\r\n:0\r\n:1\r\n"
	stream := []byte(strings.Repeat(reply, 256))
	s := newRESPScanner(ReplyLimits{})
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	for b.Loop() {
		for p := stream; len(p) > 0; {
			n := min(len(p), 4096)
			if err := s.feed(p[:n]); err != nil {
				b.Fatal(err)
			}
			p = p[n:]
		}
	}
}
