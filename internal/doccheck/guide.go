package doccheck

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
)

// LLMGuideConfig returns the first ```yaml config block of the LLM guide,
// docs/guides/llm-gateway.md under root (the repository): the
// configuration it tells a reader to save as llm.yaml, which the tests
// that run the guide load as written.
func LLMGuideConfig(root string) (string, error) {
	b, err := os.ReadFile(filepath.Join(root, "docs", "guides", "llm-gateway.md"))
	if err != nil {
		return "", err
	}
	_, rest, ok := strings.Cut(string(b), "```yaml config\n")
	block, _, closed := strings.Cut(rest, "\n```")
	if !ok || !closed {
		return "", errors.New("docs/guides/llm-gateway.md has no ```yaml config block")
	}
	return block, nil
}
