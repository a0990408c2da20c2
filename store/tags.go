package store

import (
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Limits of task tags.
const (
	MaxTags        = 20  // tags per task
	MaxTagKeyLen   = 63  // bytes of a key
	MaxTagValueLen = 255 // bytes of a value
)

// ValidateTags checks a task's tags: at most MaxTags; each key of 1 to
// MaxTagKeyLen bytes of ASCII letters, digits, '_', '.', '-' and '/',
// starting with a letter or digit; each value of 1 to MaxTagValueLen bytes
// of valid UTF-8 without control characters. Errors are FieldErrors of
// the field "tags" that name the tag.
func ValidateTags(tags map[string]string) error {
	if len(tags) > MaxTags {
		return Invalidf("tags", "%d tags, at most %d are allowed", len(tags), MaxTags)
	}
	keys := make([]string, 0, len(tags))
	for k := range tags {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := ValidateTag(k, tags[k]); err != nil {
			return err
		}
	}
	return nil
}

// ValidateTag checks one tag (see ValidateTags).
func ValidateTag(key, value string) error {
	switch {
	case key == "":
		return Invalidf("tags", "the key is empty")
	case len(key) > MaxTagKeyLen:
		return Invalidf("tags", "tag %q: the key is longer than %d bytes", abbrevTag(key), MaxTagKeyLen)
	case !tagKeyStart(key[0]):
		return Invalidf("tags", "tag %q: a key starts with a letter or digit", abbrevTag(key))
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; !tagKeyStart(c) && !strings.ContainsRune("_.-/", rune(c)) {
			return Invalidf("tags", "tag %q: a key holds ASCII letters, digits, '_', '.', '-' and '/' only", abbrevTag(key))
		}
	}
	switch {
	case value == "":
		return Invalidf("tags", "tag %q: the value is empty", key)
	case len(value) > MaxTagValueLen:
		return Invalidf("tags", "tag %q: the value is longer than %d bytes", key, MaxTagValueLen)
	case !utf8.ValidString(value):
		return Invalidf("tags", "tag %q: the value is not valid UTF-8", key)
	case strings.IndexFunc(value, unicode.IsControl) >= 0:
		return Invalidf("tags", "tag %q: the value holds a control character", key)
	}
	return nil
}

func tagKeyStart(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func abbrevTag(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// ParseTag reads "key=value" as the CLI and query strings give a tag, and
// validates it.
func ParseTag(s string) (key, value string, err error) {
	if key, value, err = SplitTag(s); err != nil {
		return "", "", err
	}
	if err := ValidateTag(key, value); err != nil {
		return "", "", err
	}
	return key, value, nil
}

// SplitTag reads "key=value" without validating the tag: for a tag that
// is checked where it is stored (a submission's).
func SplitTag(s string) (key, value string, err error) {
	key, value, ok := strings.Cut(s, "=")
	if !ok {
		return "", "", Invalidf("tags", "tag %q: want KEY=VALUE", abbrevTag(s))
	}
	return key, value, nil
}
