// Package config reads weft.yaml, the configuration file of the weft
// command: a YAML mapping of known keys (nested mappings name them with
// dots, as serve.addr), each a scalar, a list of scalars or a mapping of
// scalars. Unknown keys are errors naming the file and line. Values may
// use ${VAR} (an environment variable, an error when unset),
// ${VAR:-default}, ${file:PATH} (a file's content without its trailing
// newline; a relative PATH is relative to the configuration file) and $$
// for a dollar sign.
//
// Resolve layers the settings (layers.go): defaults < the file < the
// environment < flags. The command's table of settings, which flag of
// which command each one sets, is in cmd/weft/config.go.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Kind is the shape of a setting's value.
type Kind int

const (
	// Scalar: one value.
	Scalar Kind = iota
	// List: a list of values (a single scalar is a list of one).
	List
	// Map: a mapping of names to values, read as "name=value" items in
	// the file's order.
	Map
)

// Value is a setting as read from a file.
type Value struct {
	// Items holds the value: one item for a Scalar.
	Items []string
	// Text holds each item as the file writes it, before interpolation
	// ("name=text" for a Map): what an error about an item quotes, so
	// that it names a ${file:PATH} or ${VAR} and not what it held.
	Text []string
	// File and Line say where it was set.
	File string
	Line int
	// FromFile is set when a ${file:PATH} interpolation made the value:
	// such values are often secrets, and are shown redacted.
	FromFile bool
}

// Where is "FILE:LINE".
func (v Value) Where() string { return fmt.Sprintf("%s:%d", v.File, v.Line) }

// maxFile bounds a configuration file and each file it interpolates.
const maxFile = 1 << 20

// Load reads the configuration file at path: the values of the keys of
// schema it sets, by key.
func Load(path string, schema map[string]Kind, getenv func(string) string) (map[string]Value, error) {
	b, err := readCapped(path)
	if err != nil {
		return nil, err
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return map[string]Value{}, nil // an empty file sets nothing
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	l := &loader{path: path, dir: filepath.Dir(path), schema: schema, getenv: getenv, out: map[string]Value{}}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return l.out, nil
	}
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s:%d: the configuration must be a mapping of settings", path, root.Line)
	}
	if err := l.mapping(root, ""); err != nil {
		return nil, err
	}
	return l.out, nil
}

func readCapped(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxFile+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > maxFile {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxFile)
	}
	return b, nil
}

type loader struct {
	path, dir string
	schema    map[string]Kind
	getenv    func(string) string
	out       map[string]Value
}

func (l *loader) errorf(n *yaml.Node, format string, args ...any) error {
	return fmt.Errorf("%s:%d: %s", l.path, n.Line, fmt.Sprintf(format, args...))
}

// section reports whether some key of the schema is under prefix.
func (l *loader) section(prefix string) bool {
	for k := range l.schema {
		if strings.HasPrefix(k, prefix+".") {
			return true
		}
	}
	return false
}

func (l *loader) mapping(n *yaml.Node, prefix string) error {
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, vn := n.Content[i], n.Content[i+1]
		key := kn.Value
		if prefix != "" {
			key = prefix + "." + kn.Value
		}
		if seen[key] {
			return l.errorf(kn, "%s is set twice", key)
		}
		seen[key] = true
		kind, known := l.schema[key]
		switch {
		case known:
			if err := l.value(key, kind, kn.Line, vn); err != nil {
				return err
			}
		case l.section(key) && vn.Kind == yaml.MappingNode:
			if err := l.mapping(vn, key); err != nil {
				return err
			}
		case l.section(key):
			return l.errorf(vn, "%s must be a mapping of settings", key)
		default:
			return l.errorf(kn, "unknown key %q", key)
		}
	}
	return nil
}

// value reads the value n of key, set on line.
func (l *loader) value(key string, kind Kind, line int, n *yaml.Node) error {
	v := Value{File: l.path, Line: line}
	add := func(item *yaml.Node, name string) error {
		if item.Kind != yaml.ScalarNode {
			return l.errorf(item, "%s: want a plain value here", key)
		}
		text, fromFile, err := Interpolate(item.Value, l.getenv, l.dir)
		if err != nil {
			return l.errorf(item, "%s: %v", key, err)
		}
		written := item.Value
		if name != "" {
			text, written = name+"="+text, name+"="+written
		}
		v.Items = append(v.Items, text)
		v.Text = append(v.Text, written)
		v.FromFile = v.FromFile || fromFile
		return nil
	}
	switch {
	case n.Kind == yaml.ScalarNode && n.Tag == "!!null":
		return nil // "key:" with nothing sets nothing
	case kind == Scalar && n.Kind == yaml.ScalarNode, kind == List && n.Kind == yaml.ScalarNode:
		if err := add(n, ""); err != nil {
			return err
		}
	case kind == List && n.Kind == yaml.SequenceNode:
		for _, item := range n.Content {
			if err := add(item, ""); err != nil {
				return err
			}
		}
	case kind == Map && n.Kind == yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			if err := add(n.Content[i+1], n.Content[i].Value); err != nil {
				return err
			}
		}
	default:
		want := map[Kind]string{Scalar: "a single value", List: "a list", Map: "a mapping of names to values"}[kind]
		return l.errorf(n, "%s: want %s", key, want)
	}
	l.out[key] = v
	return nil
}

var ref = regexp.MustCompile(`\$\$|\$\{([^}]*)\}`)

// varName is an environment variable's name.
var varName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Interpolate expands ${VAR}, ${VAR:-default}, ${file:PATH} and $$ in s.
// fromFile reports a ${file:} expansion. A relative PATH is relative to dir.
func Interpolate(s string, getenv func(string) string, dir string) (out string, fromFile bool, err error) {
	if !strings.Contains(s, "$") {
		return s, false, nil
	}
	if i := strings.Index(s, "${"); i >= 0 && !strings.Contains(s[i:], "}") {
		return "", false, fmt.Errorf("%q: ${ is not closed", s[i:])
	}
	out = ref.ReplaceAllStringFunc(s, func(m string) string {
		if err != nil {
			return ""
		}
		if m == "$$" {
			return "$"
		}
		inner := m[2 : len(m)-1]
		switch {
		case strings.HasPrefix(inner, "file:"):
			path := inner[len("file:"):]
			if path == "" {
				err = errors.New("${file:}: a path is required")
				return ""
			}
			if !filepath.IsAbs(path) {
				path = filepath.Join(dir, path)
			}
			b, rerr := readCapped(path)
			if rerr != nil {
				err = fmt.Errorf("${file:%s}: %w", inner[len("file:"):], rerr)
				return ""
			}
			fromFile = true
			return strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
		case strings.HasPrefix(inner, "secret:"):
			err = fmt.Errorf("%s: secrets are named in workflow templates, resolved when steps run; here use ${VAR} or ${file:PATH}", m)
			return ""
		}
		name, def, hasDef := strings.Cut(inner, ":-")
		if !varName.MatchString(name) {
			err = fmt.Errorf("%s: want ${VAR}, ${VAR:-default} or ${file:PATH}", m)
			return ""
		}
		v := getenv(name)
		switch {
		case v != "":
			return v
		case hasDef:
			return def
		}
		err = fmt.Errorf("%s: %s is not set (give a default as ${%s:-default})", m, name, name)
		return ""
	})
	if err != nil {
		return "", false, err
	}
	return out, fromFile, nil
}
