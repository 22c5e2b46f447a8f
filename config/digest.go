package config

import (
	"crypto/sha256"
	"os"
)

// Digest identifies the content of a config file: the SHA-256 of its
// bytes. Two files with the same bytes have the same Digest whatever their
// modification times, inode or the symlinks that lead to them.
type Digest [sha256.Size]byte

// FileDigest returns the Digest of the file at path, and false when it
// cannot be read (missing, a directory, no permission).
func FileDigest(path string) (Digest, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Digest{}, false
	}
	return sha256.Sum256(b), true
}
