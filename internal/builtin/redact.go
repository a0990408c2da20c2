package builtin

import (
	"bytes"
	"cmp"
	"encoding/json"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// This file keeps resolved secrets out of what a step returns. A value
// rarely leaves as it is: net/http quotes a URL percent-encoded, a service
// echoes a header trimmed or a query decoded and re-encoded, JSON escapes
// quotes and <, Go's %q escapes backslashes. The redactor replaces every
// form a value takes on its way out with [secret:NAME], built once when
// the secret is resolved.

// redactor replaces the forms of the resolved secrets with their names.
// The nil redactor (no secrets) replaces nothing.
type redactor struct {
	forms    []string          // every form of every secret, longest first
	replacer *strings.Replacer // each form with its secret's [secret:NAME]
}

// newRedactor returns the redactor of the secrets values (by name).
func newRedactor(values map[string]string) *redactor {
	type form struct{ text, name string }
	var all []form
	seen := map[string]bool{}
	for _, name := range sortedKeys(values) {
		for _, f := range secretForms(values[name]) {
			if !seen[f] {
				seen[f] = true
				all = append(all, form{f, name})
			}
		}
	}
	if len(all) == 0 {
		return nil
	}
	// Longest first: strings.Replacer tries the forms in this order at
	// each position, so a form is replaced whole rather than a shorter
	// one inside it.
	slices.SortStableFunc(all, func(a, b form) int { return cmp.Compare(len(b.text), len(a.text)) })
	r := &redactor{}
	pairs := make([]string, 0, 2*len(all))
	for _, f := range all {
		r.forms = append(r.forms, f.text)
		pairs = append(pairs, f.text, "[secret:"+f.name+"]")
	}
	r.replacer = strings.NewReplacer(pairs...)
	return r
}

// secretForms returns the forms of a secret's value v, each non-empty
// once: v and v as a server reads it in a header (trimmed); each of
// these escaped for a URL (url.PathEscape, url.QueryEscape, as net/url
// writes a path, a query, a fragment and user info, and every byte but
// letters, digits and -._~ %-encoded, with %20 and with + for a space),
// with upper- and lower-case hex; and each of those quoted (quotedTexts),
// once and twice.
func secretForms(v string) []string {
	var plain []string
	for _, s := range []string{v, strings.Trim(v, " \t\r\n")} {
		plain = append(plain, s,
			url.PathEscape(s), url.QueryEscape(s),
			urlText("http://h/", s), urlText("http://h/?", s), urlText("http://h/#", s),
			strings.TrimPrefix(url.UserPassword("", s).String(), ":"),
			percentEncode(s, false), percentEncode(s, true))
	}
	for i := range len(plain) {
		plain = append(plain, lowerHexEscapes(plain[i]))
	}
	var out []string
	seen := map[string]bool{"": true}
	add := func(s string) {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	for _, s := range plain {
		add(s)
		for _, q := range quotedTexts(s) {
			add(q)
			if q != s {
				// Quoted twice: JSON in a Go-quoted error, say.
				for _, qq := range quotedTexts(q) {
					add(qq)
				}
			}
		}
	}
	return out
}

// quotedTexts returns s as a JSON string holds it (json.Marshal's, with
// \u003c for <, one without HTML escapes, one in ASCII) and as a
// Go-quoted string does (%q and %+q), without the quotes.
func quotedTexts(s string) []string {
	noHTML := jsonText(s, false)
	return []string{jsonText(s, true), noHTML, asciiJSONText(noHTML), unquote(strconv.Quote(s)), unquote(strconv.QuoteToASCII(s))}
}

// urlText returns s as net/url writes it after prefix, the start of a URL:
// so it reads in a URL that has it there (a path, say, escaped up to a
// '?' that starts the query, which is written as it is); "" when it
// cannot be parsed.
func urlText(prefix, s string) string {
	u, err := url.Parse(prefix + s)
	if err != nil {
		return ""
	}
	w, ok := strings.CutPrefix(u.String(), prefix)
	if !ok {
		return ""
	}
	return w
}

// percentEncode %-encodes every byte of s but RFC 3986's unreserved
// characters (letters, digits and -._~), a space as + when plus is set.
func percentEncode(s string, plus bool) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '.', c == '_', c == '~':
			b.WriteByte(c)
		case c == ' ' && plus:
			b.WriteByte('+')
		default:
			b.Write([]byte{'%', hex[c>>4], hex[c&15]})
		}
	}
	return b.String()
}

// lowerHexEscapes returns s with the hex digits of its %-escapes in lower
// case.
func lowerHexEscapes(s string) string {
	b := []byte(s)
	for i := 0; i+2 < len(b); i++ {
		if b[i] == '%' && isHex(b[i+1]) && isHex(b[i+2]) {
			b[i+1], b[i+2] = lowerASCII(b[i+1]), lowerASCII(b[i+2])
			i += 2
		}
	}
	return string(b)
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// jsonText returns s as encoding/json writes it in a string, without the
// quotes; escapeHTML writes <, > and & as \u003c, \u003e and \u0026.
func jsonText(s string, escapeHTML bool) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(escapeHTML)
	if err := enc.Encode(s); err != nil {
		return "" // cannot happen for a string
	}
	return unquote(strings.TrimSuffix(b.String(), "\n"))
}

// asciiJSONText returns the text of a JSON string with each character
// that is not ASCII as a \u escape (a pair for one beyond the BMP), as
// Python's json.dumps writes it.
func asciiJSONText(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r < utf8.RuneSelf {
			b.WriteRune(r)
			continue
		}
		for _, u := range utf16.Encode([]rune{r}) {
			b.WriteString(`\u`)
			b.WriteString(strconv.FormatUint(uint64(u)|0x10000, 16)[1:])
		}
	}
	return b.String()
}

// unquote strips the quotes around q.
func unquote(q string) string {
	if len(q) < 2 {
		return ""
	}
	return q[1 : len(q)-1]
}

// text returns s with each form of a secret replaced with its name.
func (r *redactor) text(s string) string {
	if r == nil {
		return s
	}
	return r.replacer.Replace(s)
}

// json returns the JSON document b with the secrets replaced: in the text
// of each string (decoded, so that a value is found however the document
// escapes it, once more if the text holds JSON), then in the document
// (a secret that is a number). A document that replacing left invalid is
// returned as a JSON string of its text.
func (r *redactor) json(b []byte) []byte {
	if r == nil {
		return b
	}
	var out []byte // nil until a string changes
	last := 0
	for i := 0; i < len(b); i++ {
		if b[i] != '"' {
			continue
		}
		// A string: up to the next quote that is not escaped. Only one
		// with escapes reads other than its text, which the pass over
		// the document sees.
		j, escaped := i+1, false
		for ; j < len(b) && b[j] != '"'; j++ {
			if b[j] == '\\' {
				escaped = true
				j++
			}
		}
		if j >= len(b) {
			break
		}
		if escaped {
			var s string
			if err := json.Unmarshal(b[i:j+1], &s); err == nil {
				if red := r.text(s); red != s {
					q, _ := json.Marshal(red)
					out = append(append(out, b[last:i]...), q...)
					last = j + 1
				}
			}
		}
		i = j
	}
	if out != nil {
		b = append(out, b[last:]...)
	}
	red := []byte(r.text(string(b)))
	if !bytes.Equal(red, b) && !json.Valid(red) {
		red, _ = json.Marshal(string(red))
	}
	return red
}

// head returns b, the start of a longer output, less what it ends with of
// the start of a secret's form: what a limit left of it, which text would
// not recognize.
func (r *redactor) head(b []byte) []byte {
	if r == nil {
		return b
	}
	for _, f := range r.forms {
		for i := max(0, len(b)-len(f)+1); i < len(b); i++ {
			if b[i] == f[0] && string(b[i:]) == f[:len(b)-i] {
				b = b[:i]
				break
			}
		}
	}
	return b
}

// tail returns b, the end of a longer output, less what it starts with of
// the end of a secret's form.
func (r *redactor) tail(b []byte) []byte {
	if r == nil {
		return b
	}
	for _, f := range r.forms {
		for n := min(len(f)-1, len(b)); n > 0; n-- {
			if b[n-1] == f[len(f)-1] && string(b[:n]) == f[len(f)-n:] {
				b = b[n:]
				break
			}
		}
	}
	return b
}

// longest is the length of the longest form, 0 for none.
func (r *redactor) longest() int {
	if r == nil {
		return 0
	}
	return len(r.forms[0])
}
