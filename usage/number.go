package usage

// MaxUnits is the largest usage a source may report: 2^53.
const MaxUnits = 1 << 53

// DefaultMaxPrefix is the bound on parsed bytes when a caller passes 0:
// 1 MiB.
const DefaultMaxPrefix = 1 << 20

// parseUnits parses s as a usage: one or more ASCII digits whose value is
// at most MaxUnits (leading zeros are allowed). ok is false for anything
// else, including the empty string.
func parseUnits(s string) (n uint64, ok bool) {
	if s == "" {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
		if n > MaxUnits {
			return 0, false
		}
	}
	return n, true
}
