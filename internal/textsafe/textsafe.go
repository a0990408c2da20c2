// Package textsafe keeps text and JSON that came from outside (a handler's
// error, a command's output, a request body) storable in every store.
// PostgreSQL refuses a NUL character in text and in jsonb (whether as a
// byte or as the escape \u0000), bytes that are not UTF-8, and in jsonb a
// \u escape of a lone UTF-16 surrogate; SQLite takes them all. weft holds
// both stores to the PostgreSQL rule, so that a step behaves the same on
// either.
//
// Text is sanitized (String): each NUL and each byte that is not UTF-8
// becomes U+FFFD. JSON is checked (Find) for the escapes that cannot be
// stored, which cannot be replaced without changing the data, and its bytes
// that are not UTF-8 can be replaced with U+FFFD (ValidJSON), as Go's own
// encoding/json reads them.
package textsafe

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Problems Find and Check report.
var (
	ErrNUL       = errors.New(`contains a NUL character (\u0000)`)
	ErrNotUTF8   = errors.New("contains bytes that are not UTF-8")
	ErrSurrogate = errors.New("contains a \\u escape of a lone UTF-16 surrogate")
)

// Storable reports whether s can be stored as text as it is.
func Storable(s string) bool {
	return strings.IndexByte(s, 0) < 0 && utf8.ValidString(s)
}

// Check returns ErrNUL or ErrNotUTF8 when s cannot be stored as text.
func Check(s string) error {
	switch {
	case strings.IndexByte(s, 0) >= 0:
		return ErrNUL
	case !utf8.ValidString(s):
		return ErrNotUTF8
	}
	return nil
}

// String returns s with each NUL and each byte that is not UTF-8 replaced
// with U+FFFD; s itself when it has neither.
func String(s string) string {
	if Storable(s) {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

// ValidJSON returns the JSON document b with each byte that is not UTF-8
// replaced with U+FFFD (in a valid document such bytes can only be inside
// strings, so the result is still valid); b itself when it is UTF-8.
func ValidJSON(b []byte) []byte {
	if utf8.Valid(b) {
		return b
	}
	return bytes.ToValidUTF8(b, []byte("\uFFFD"))
}

// Join adds a path from Find to the name of the JSON value it is in:
// ("result", "items[2]") is "result.items[2]", ("result", "[0]") is
// "result[0]", ("result", "") is "result".
func Join(name, path string) string {
	switch {
	case path == "":
		return name
	case path[0] == '[':
		return name + path
	}
	return name + "." + path
}

// Find looks through the valid JSON document b for a string, key or value,
// that cannot be stored: one with bytes that are not UTF-8 (ErrNotUTF8), a
// \u0000 escape (ErrNUL) or an escape of a lone surrogate (ErrSurrogate).
// It returns the path of the first one, as in "items[2].name" (the empty
// string for the document itself), and the problem; a nil error when there
// is none. A document that is not valid JSON may be reported on or not.
func Find(b []byte) (path string, err error) {
	s := scanner{b: b}
	return s.value("")
}

// scanner walks a JSON document that is valid (encoding/json accepted it).
type scanner struct {
	b []byte
	i int
}

func (s *scanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) value(path string) (string, error) {
	s.space()
	if s.i >= len(s.b) {
		return "", nil
	}
	switch s.b[s.i] {
	case '{':
		s.i++
		for {
			s.space()
			if s.i >= len(s.b) {
				return "", nil
			}
			switch s.b[s.i] {
			case '}':
				s.i++
				return "", nil
			case ',':
				s.i++
				continue
			case '"':
			default:
				return "", nil // not valid JSON: nothing more to say
			}
			key, err := s.str()
			field := join(path, key)
			if err != nil {
				return field, err
			}
			s.space()
			if s.i < len(s.b) && s.b[s.i] == ':' {
				s.i++
			}
			if p, err := s.value(field); err != nil {
				return p, err
			}
		}
	case '[':
		s.i++
		for n := 0; ; n++ {
			s.space()
			if s.i >= len(s.b) {
				return "", nil
			}
			switch s.b[s.i] {
			case ']':
				s.i++
				return "", nil
			case ',':
				s.i++
				n--
				continue
			}
			at := s.i
			if p, err := s.value(path + "[" + strconv.Itoa(n) + "]"); err != nil {
				return p, err
			}
			if s.i == at {
				return "", nil // no progress: not valid JSON
			}
		}
	case '"':
		_, err := s.str()
		return path, err
	default:
		// A number, true, false or null.
		for s.i < len(s.b) && strings.IndexByte(",}] \t\n\r", s.b[s.i]) < 0 {
			s.i++
		}
		return "", nil
	}
}

// str reads the string at s.i (its opening quote) and returns its text as
// far as it can be shown in a path, and the first problem in it.
func (s *scanner) str() (string, error) {
	s.i++ // the opening quote
	start := s.i
	var problem error
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			text := string(s.b[start:s.i])
			s.i++
			return String(text), problem
		case c == '\\':
			if s.i+1 < len(s.b) && s.b[s.i+1] == 'u' && s.i+6 <= len(s.b) {
				r, ok := hex4(s.b[s.i+2 : s.i+6])
				s.i += 6
				switch {
				case !ok:
				case r == 0:
					problem = first(problem, ErrNUL)
				case 0xD800 <= r && r <= 0xDBFF:
					// A high surrogate must be followed by a low one.
					if s.i+6 <= len(s.b) && s.b[s.i] == '\\' && s.b[s.i+1] == 'u' {
						if lo, ok := hex4(s.b[s.i+2 : s.i+6]); ok && 0xDC00 <= lo && lo <= 0xDFFF {
							s.i += 6
							continue
						}
					}
					problem = first(problem, ErrSurrogate)
				case 0xDC00 <= r && r <= 0xDFFF:
					problem = first(problem, ErrSurrogate)
				}
				continue
			}
			s.i += 2
		case c < utf8.RuneSelf:
			if c == 0 {
				problem = first(problem, ErrNUL)
			}
			s.i++
		default:
			r, size := utf8.DecodeRune(s.b[s.i:])
			if r == utf8.RuneError && size == 1 {
				problem = first(problem, ErrNotUTF8)
			}
			s.i += size
		}
	}
	return String(string(s.b[start:])), problem
}

func first(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func hex4(b []byte) (rune, bool) {
	v, err := strconv.ParseUint(string(b), 16, 32)
	return rune(v), err == nil
}

// join adds an object key to a path.
func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
