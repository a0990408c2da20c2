// Package ident is the rule for weft's names: those of namespaces,
// workflows, versions, steps, signals, handlers, schedules and workers.
// The workflow, store and durable packages and the server share it.
package ident

// MaxLen bounds a name, in bytes.
const MaxLen = 128

// Rule says what a valid name is, for error messages.
const Rule = "letters, digits, '_', '.' and '-', starting with a letter or digit, at most 128 bytes"

// Valid reports whether s is a valid name: 1 to MaxLen bytes of ASCII
// letters, digits, '_', '.' and '-', the first a letter or a digit.
func Valid(s string) bool {
	if s == "" || len(s) > MaxLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case i > 0 && (c == '_' || c == '.' || c == '-'):
		default:
			return false
		}
	}
	return true
}
