// Package redact hides the credentials of database URLs and DSNs, and the
// passwords of webhook URLs, in text meant for people: log lines, error
// messages, API answers, printed commands. It is weftdb.Redact's
// implementation, kept here so that store/postgres (which weftdb imports)
// uses the same function for the errors it returns.
package redact

import (
	"errors"
	"io/fs"
	"net/url"
	"regexp"
	"strings"
)

// Mask replaces a credential.
const Mask = "***"

// passwordParam matches a password given as a keyword/value pair, in a DSN
// ("password=x", "password = 'a b'") or a URL query ("?password=x",
// "&sslpassword=x"): the keyword, then the value, quoted or not.
var passwordParam = regexp.MustCompile(`(?i)((?:^|[\s?&;,(])(?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'?|[^\s&]*)`)

// String hides every password in s: the password of each URL's userinfo
// (scheme://user:PASSWORD@host) and the value of every password keyword,
// in DSN form (password=x, password='x y') or as a query parameter
// (?password=x). Text without credentials is returned unchanged.
func String(s string) string {
	s = redactUserinfo(s)
	return passwordParam.ReplaceAllString(s, "${1}"+Mask)
}

// redactUserinfo hides the password of every scheme://user:password@ in s.
// The userinfo ends at the last '@' before the next whitespace, so that a
// password holding '@' is hidden whole.
func redactUserinfo(s string) string {
	var b strings.Builder
	for {
		i := strings.Index(s, "://")
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:i+3])
		s = s[i+3:]
		end := strings.IndexAny(s, " \t\r\n\"'`")
		if end < 0 {
			end = len(s)
		}
		at := strings.LastIndex(s[:end], "@")
		if at < 0 {
			continue
		}
		if user, _, ok := strings.Cut(s[:at], ":"); ok {
			b.WriteString(user + ":" + Mask)
			s = s[at:]
		}
	}
}

// Secrets returns the passwords a URL or DSN holds, as written and
// decoded, so that they can be hidden wherever they are echoed, in any
// form.
func Secrets(dsn string) []string {
	var out []string
	add := func(v string) {
		if v == "" {
			return
		}
		out = append(out, v)
		if d, err := url.PathUnescape(v); err == nil && d != v {
			out = append(out, d)
		}
		if d, err := url.QueryUnescape(v); err == nil && d != v {
			out = append(out, d)
		}
	}
	if i := strings.Index(dsn, "://"); i >= 0 {
		rest := dsn[i+3:]
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			if _, pw, ok := strings.Cut(rest[:at], ":"); ok {
				add(pw)
			}
		}
	}
	for _, m := range passwordParam.FindAllStringSubmatch(dsn, -1) {
		v := m[2]
		if len(v) >= 2 && v[0] == '\'' && v[len(v)-1] == '\'' {
			v = strings.ReplaceAll(strings.ReplaceAll(v[1:len(v)-1], `\'`, `'`), `\\`, `\`)
		}
		add(v)
	}
	return out
}

// Text returns s with the credentials of dsn hidden, however s echoes
// them: quoted in a URL (as String hides them), or alone, as written or
// decoded (as Secrets finds them).
func Text(s, dsn string) string {
	// The secrets first: String finds a URL's password only up to a
	// space or a quote, and would leave the rest of one that holds them.
	for _, secret := range Secrets(dsn) {
		s = strings.ReplaceAll(s, secret, Mask)
	}
	return String(s)
}

// URL returns raw, a URL kept with its credentials (a webhook's), in the
// form it may be shown: the password of its userinfo replaced as
// url.URL.Redacted replaces it (scheme://user:xxxxx@host/path), the rest
// left as it is, so that people can still tell one URL from another. A URL
// without an authority (scheme:opaque) shows only its scheme, and text that
// does not parse as a URL is shown as Mask: what either holds cannot be
// told apart from a credential.
func URL(raw string) string {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return Mask
	case u.Opaque != "":
		return u.Scheme + ":" + Mask
	}
	return u.Redacted()
}

// Error returns err with the credentials of dsn hidden from its message,
// however the message echoes them (a driver may quote the connection
// string, or parts of it decoded). The result wraps err, so errors.Is and
// errors.As still see through it.
func Error(err error, dsn string) error {
	if err == nil {
		return nil
	}
	msg := Text(err.Error(), dsn)
	if msg == err.Error() {
		return err
	}
	return &redacted{msg: msg, err: err}
}

type redacted struct {
	msg string
	err error
}

func (r *redacted) Error() string { return r.msg }
func (r *redacted) Unwrap() error { return r.err }

// PathCause is err without the path a *fs.PathError names, for an error
// whose path came from a value that must not be shown (a ${file:...}
// reference's, say): the caller names the file its own way.
func PathCause(err error) error {
	if pe, ok := errors.AsType[*fs.PathError](err); ok {
		return pe.Err
	}
	return err
}
