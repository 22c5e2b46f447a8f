package main

import (
	"go/doc/comment"
	"regexp"
	"strings"
	"unicode"
)

// markdown turns a Go doc comment into Markdown, keeping its words. Only
// the spelling of names changes: a Go field name of ctx (the struct the
// comment documents a field of, or the struct itself) becomes its key
// (Listen → `listen`, Fleet.Static → `fleet.static`), an exported
// constant shows its value, and what is plainly code (key paths such as
// store.fleet_size, quoted literals, Go names, URL paths) is set as code.
func (w *walker) markdown(doc string, ctx *typ) string {
	if strings.TrimSpace(doc) == "" {
		return ""
	}
	var p comment.Parser
	d := p.Parse(doc)
	var b strings.Builder
	first := true
	for i, blk := range d.Content {
		if i > 0 {
			b.WriteString("\n\n")
		}
		w.block(&b, blk, ctx, &first)
	}
	return b.String()
}

func (w *walker) block(b *strings.Builder, blk comment.Block, ctx *typ, first *bool) {
	switch blk := blk.(type) {
	case *comment.Paragraph:
		b.WriteString(escapeLineStart(w.texts(blk.Text, ctx, first)))
	case *comment.Heading:
		b.WriteString("**" + w.texts(blk.Text, ctx, first) + "**")
	case *comment.Code:
		b.WriteString("```\n" + strings.TrimRight(blk.Text, "\n") + "\n```")
	case *comment.List:
		for i, item := range blk.Items {
			if i > 0 {
				b.WriteString("\n")
			}
			marker := "- "
			if item.Number != "" {
				marker = item.Number + ". "
			}
			var ib strings.Builder
			for j, c := range item.Content {
				if j > 0 {
					ib.WriteString("\n\n")
				}
				w.block(&ib, c, ctx, first)
			}
			b.WriteString(marker + strings.ReplaceAll(ib.String(), "\n", "\n  "))
		}
	}
}

func (w *walker) texts(ts []comment.Text, ctx *typ, first *bool) string {
	var b strings.Builder
	for _, t := range ts {
		switch t := t.(type) {
		case comment.Plain:
			b.WriteString(w.inline(strings.ReplaceAll(string(t), "\n", " "), ctx, *first))
		case comment.Italic:
			b.WriteString("*" + escapeText(string(t)) + "*")
		case *comment.Link:
			b.WriteString("[" + w.texts(t.Text, ctx, new(bool)) + "](" + t.URL + ")")
		case *comment.DocLink:
			b.WriteString(w.texts(t.Text, ctx, new(bool)))
		}
		*first = false
	}
	return b.String()
}

// tokenRE finds what inline sets apart, one alternative per group:
// code spans already written, quoted literals, braces ({name}), Go names
// qualified by a package (ratelimit.Limit), key paths and snake_case
// words, bracketed character classes, URL paths, environment variables
// (QUOTAGATE_LOG_LEVEL=debug) and Go names.
var tokenRE = regexp.MustCompile(strings.Join([]string{
	"(`[^`]+`)",
	`("[^"\s]+")`,
	`(\{[^{}]*\})`,
	`([a-z][a-z0-9]*(?:\.[a-z0-9_]+)*\.[A-Z]\w*(?:\.[A-Z]\w*)*)`,
	`([a-z][a-z0-9]+(?:_[a-z0-9]+)*(?:\[\])?(?:\.(?:[a-z][a-z0-9]+(?:_[a-z0-9]+)*|\*)(?:\[\])?)+|[a-z][a-z0-9]*(?:_[a-z0-9]+)+)`,
	`(\[[^\]\s]+\])`,
	`(/[a-z_][\w./-]*)`,
	`([A-Z][A-Z0-9]*_[A-Z0-9_]*(?:\*|=[^\s)]*)?)`,
	`([A-Z][A-Za-z0-9]*(?:\.[A-Z][A-Za-z0-9]*)*)`,
}, "|"))

const (
	tCode = 1 + iota
	tQuoted
	tBraces
	tQualified
	tPath
	tClass
	tURLPath
	tEnvVar
	tGoName
)

// inline converts plain text; subject says the text starts the comment,
// whose first word names what it documents.
func (w *walker) inline(s string, ctx *typ, subject bool) string {
	var b strings.Builder
	last := 0
	for _, m := range tokenRE.FindAllStringSubmatchIndex(s, -1) {
		g := 0
		for i := 1; i < len(m)/2; i++ {
			if m[2*i] >= 0 {
				g = i
				break
			}
		}
		start, end := m[0], m[1]
		tok := s[start:end]
		var before byte
		if start > 0 {
			before = s[start-1]
		}
		out, ok := w.token(g, tok, before, ctx, subject && start == 0, sentenceStart(s[:start]), afterArticle(s[:start]))
		if !ok {
			continue
		}
		b.WriteString(escapeText(s[last:start]))
		b.WriteString(out)
		last = end
	}
	b.WriteString(escapeText(s[last:]))
	return b.String()
}

// token converts one token of group g; ok is false to leave it as text.
func (w *walker) token(g int, tok string, before byte, ctx *typ, subject, sentence, article bool) (string, bool) {
	inWord := before != 0 && (isWordByte(before) || strings.IndexByte(".-/", before) >= 0)
	switch g {
	case tCode:
		return tok, true
	case tQuoted, tBraces, tClass, tEnvVar:
		return code(tok), true
	case tQualified, tPath:
		if inWord {
			return "", false
		}
		return code(tok), true
	case tURLPath:
		if before != 0 && before != ' ' && before != '(' {
			return "", false
		}
		return code(tok), true
	case tGoName:
		if before != 0 && (isWordByte(before) || before == '.') {
			return "", false
		}
		return w.goName(tok, ctx, subject, sentence, article)
	}
	return "", false
}

// goName converts a Go name: a field (or a chain of fields) of ctx to
// its key, an exported constant of config to its name and value. A
// single name is taken for a field only where it is plainly one: as the
// comment's subject, joined words (BodyMinRate), or a capitalized word
// that starts no sentence, is no acronym and is not also its field's type
// name; never one that follows "a" or "an".
func (w *walker) goName(tok string, ctx *typ, subject, sentence, article bool) (string, bool) {
	parts := strings.Split(tok, ".")
	if ctx != nil && ctx.kind == kStruct {
		if path, ok := chain(ctx, parts); ok {
			single := len(parts) == 1
			switch {
			case single && !subject && article:
			case !single || subject || multiWord(tok):
				return code(path), true
			case !allCaps(tok) && !sentence && !namesItsType(ctx, tok):
				return code(path), true
			}
		}
	}
	if len(parts) == 1 {
		if _, ok := w.cfg.consts[tok]; ok {
			if v, err := w.cfg.constValue(tok); err == nil {
				val := formatConst(v)
				if !strings.Contains(val, " ") {
					val = code(val)
				}
				return code(tok) + " (" + val + ")", true
			}
		}
	}
	return "", false
}

// namesItsType reports whether the field name of ctx is also the name of
// its type (Redis Redis): mid-sentence, such a word more likely names the
// thing ("registered live in Redis") than the key.
func namesItsType(ctx *typ, name string) bool {
	for _, f := range ctx.fields() {
		if f.goName == name {
			return f.typ.name == name
		}
	}
	return false
}

// chain maps Go field names, each of the struct the one before holds, to
// their dotted key path.
func chain(ctx *typ, names []string) (string, bool) {
	cur := ctx
	keys := make([]string, 0, len(names))
	for _, n := range names {
		if cur == nil || cur.kind != kStruct {
			return "", false
		}
		var next *typ
		for _, f := range cur.fields() {
			if f.goName == n {
				keys = append(keys, f.tag)
				next = f.typ
				for next.kind == kSlice || next.kind == kMap {
					next = next.elem
				}
			}
		}
		if next == nil {
			return "", false
		}
		cur = next
	}
	return strings.Join(keys, "."), true
}

// multiWord reports whether a Go name joins words (BodyReadTimeout,
// CAFile): two capitals or more and a lowercase letter.
func multiWord(s string) bool {
	upper, lower := 0, 0
	for _, r := range s {
		switch {
		case unicode.IsUpper(r):
			upper++
		case unicode.IsLower(r):
			lower++
		}
	}
	return upper >= 2 && lower >= 1
}

func allCaps(s string) bool { return strings.ToUpper(s) == s }

// sentenceStart reports whether text that precedes a token ends a
// sentence (or is empty), so that a capital is no sign of a name.
func sentenceStart(before string) bool {
	t := strings.TrimRight(before, " ")
	return t == "" || strings.ContainsAny(t[len(t)-1:], ".!?:")
}

// afterArticle reports whether text that precedes a token ends in "a" or
// "an": "upgrade to a WebSocket" names a thing, not a field.
func afterArticle(before string) bool {
	f := strings.Fields(before)
	return len(f) > 0 && (f[len(f)-1] == "a" || f[len(f)-1] == "an")
}

func isWordByte(c byte) bool {
	return c == '_' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

// code sets s as a code span.
func code(s string) string {
	if strings.Contains(s, "`") {
		return "`` " + s + " ``"
	}
	return "`" + s + "`"
}

var (
	mdSpecial = strings.NewReplacer(`\`, `\\`, "`", "\\`", "*", `\*`, "_", `\_`, "[", `\[`, "]", `\]`)
	// tagRE finds a '<' that could open an HTML tag, such as <token>.
	tagRE = regexp.MustCompile(`<([A-Za-z/!?])`)
)

// escapeText escapes what Markdown would read as markup.
func escapeText(s string) string { return tagRE.ReplaceAllString(mdSpecial.Replace(s), `\<$1`) }

// escapeLineStart escapes a paragraph's first character when Markdown
// would take it for a heading, list or quote.
func escapeLineStart(s string) string {
	if s == "" {
		return s
	}
	switch s[0] {
	case '#', '-', '+', '>':
		return `\` + s
	}
	if i := strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' }); i > 0 && (s[i] == '.' || s[i] == ')') && i+1 < len(s) && s[i+1] == ' ' {
		return s[:i] + `\` + s[i:]
	}
	return s
}
