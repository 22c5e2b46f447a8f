package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
)

// instruction is one Dockerfile instruction with its continuation lines
// joined.
type instruction struct {
	cmd  string // upper case: FROM, RUN, ...
	args string // the rest of the line, trimmed
	line int    // 1-based line where the instruction starts
}

// stage is one FROM and the instructions that follow it.
type stage struct {
	image string // the FROM image, flags left out
	name  string // the AS name, "" if none
	insts []instruction
}

// parseDockerfile splits a Dockerfile into stages. It understands what
// quotagate's Dockerfile uses: comments, line continuations with a trailing
// backslash, comment lines inside a continuation, and FROM [--flag...]
// image [AS name]. Instructions before the first FROM (ARG) are dropped.
func parseDockerfile(text string) ([]stage, error) {
	var stages []stage
	var cur *instruction
	flush := func() error {
		if cur == nil {
			return nil
		}
		in := *cur
		cur = nil
		if in.cmd == "FROM" {
			st, err := parseFrom(in)
			if err != nil {
				return err
			}
			stages = append(stages, st)
			return nil
		}
		if len(stages) > 0 {
			stages[len(stages)-1].insts = append(stages[len(stages)-1].insts, in)
		}
		return nil
	}
	for i, raw := range strings.Split(text, "\n") {
		line := strings.TrimSpace(raw)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		cont := strings.HasSuffix(line, "\\")
		line = strings.TrimSpace(strings.TrimSuffix(line, "\\"))
		if cur == nil {
			cmd, args, _ := strings.Cut(line, " ")
			cur = &instruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args), line: i + 1}
		} else {
			cur.args = strings.TrimSpace(cur.args + " " + line)
		}
		if !cont {
			if err := flush(); err != nil {
				return nil, err
			}
		}
	}
	if cur != nil {
		return nil, fmt.Errorf("line %d: %s continues past the end of the file", cur.line, cur.cmd)
	}
	return stages, nil
}

func parseFrom(in instruction) (stage, error) {
	var words []string
	for _, w := range strings.Fields(in.args) {
		if !strings.HasPrefix(w, "--") {
			words = append(words, w)
		}
	}
	switch {
	case len(words) == 1:
		return stage{image: words[0]}, nil
	case len(words) == 3 && strings.EqualFold(words[1], "AS"):
		return stage{image: words[0], name: words[2]}, nil
	}
	return stage{}, fmt.Errorf("line %d: cannot read FROM %s", in.line, in.args)
}

// all returns the stage's instructions named cmd.
func (s stage) all(cmd string) []instruction {
	var out []instruction
	for _, in := range s.insts {
		if in.cmd == cmd {
			out = append(out, in)
		}
	}
	return out
}

// execForm decodes a JSON-array (exec form) argument such as
// ["/usr/local/bin/quotagate", "healthcheck"].
func execForm(args string) ([]string, error) {
	if !strings.HasPrefix(args, "[") {
		return nil, fmt.Errorf("not in exec form (a JSON array): %s", args)
	}
	var out []string
	if err := json.Unmarshal([]byte(args), &out); err != nil {
		return nil, fmt.Errorf("exec form %s: %v", args, err)
	}
	return out, nil
}

// stageEnv returns the ENV key=value pairs of s, in order.
func stageEnv(t *testing.T, s stage) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, in := range s.all("ENV") {
		words, err := shellWords(in.args)
		if err != nil {
			t.Fatalf("Dockerfile line %d: %v", in.line, err)
		}
		for _, w := range words {
			k, v, ok := strings.Cut(w, "=")
			if !ok {
				t.Fatalf("Dockerfile line %d: ENV %q: use the KEY=value form", in.line, w)
			}
			env[k] = v
		}
	}
	return env
}

// shellWords splits a shell command line into words the way sh does for the
// simple commands a Dockerfile RUN holds: blanks separate words, single
// quotes keep everything, double quotes keep everything but \" and \\, and
// a backslash outside quotes escapes the next character. Variables are left
// as written. Operators (;, &&, |) are not understood and stay words.
func shellWords(s string) ([]string, error) {
	var words []string
	var w strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		case c == '\'':
			end := strings.IndexByte(s[i+1:], '\'')
			if end < 0 {
				return nil, fmt.Errorf("unterminated ' in %s", s)
			}
			w.WriteString(s[i+1 : i+1+end])
			i += end + 1
			inWord = true
		case c == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && (s[i+1] == '"' || s[i+1] == '\\') {
					i++
				}
				w.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, fmt.Errorf("unterminated \" in %s", s)
			}
			inWord = true
		case c == '\\' && i+1 < len(s):
			i++
			w.WriteByte(s[i])
			inWord = true
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, w.String())
	}
	return words, nil
}

func TestShellWords(t *testing.T) {
	got, err := shellWords(`CGO_ENABLED=0 go build -ldflags="-s -w -X main.version=${VERSION}" -o '/out/a b' x\ y`)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"CGO_ENABLED=0", "go", "build", "-ldflags=-s -w -X main.version=${VERSION}", "-o", "/out/a b", "x y"}
	if fmt.Sprint(got) != fmt.Sprint(want) || len(got) != len(want) {
		t.Errorf("shellWords = %q, want %q", got, want)
	}
	if _, err := shellWords(`go build "-ldflags=-s`); err == nil {
		t.Error("an unterminated quote was accepted")
	}
}

// readDockerfile parses the repository's Dockerfile.
func readDockerfile(t *testing.T) []stage {
	t.Helper()
	data, err := os.ReadFile(repoPath("Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	stages, err := parseDockerfile(string(data))
	if err != nil {
		t.Fatalf("Dockerfile: %v", err)
	}
	if len(stages) == 0 {
		t.Fatal("Dockerfile: no FROM")
	}
	return stages
}
