package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// decodeFault is where a body fails to decode into its type, and why.
type decodeFault struct {
	path    string // "tasks[1].run_at"; "" for the body itself
	problem string // "must be an integer, got string"
	unknown bool   // path names a field the type does not have
}

// locateFault walks body along t to the first value that does not decode
// into its field. encoding/json names neither an array's index in a
// type error ("tasks.priority") nor the field at all in an unknown
// field's error within an array, or in an error of a type's own
// UnmarshalJSON (a time): decodeBody asks here, so that every refusal
// names its field whatever the route and the depth. ok is false where
// the walk finds nothing wrong (the error was not of one value).
func locateFault(body []byte, t reflect.Type) (decodeFault, bool) {
	return locate(bytes.TrimSpace(body), t, "", false)
}

var (
	unmarshalerType = reflect.TypeFor[json.Unmarshaler]()
	timeType        = reflect.TypeFor[time.Time]()
)

// locate is locateFault of raw, a value at path; quoted: its field has the
// ",string" option.
func locate(raw []byte, t reflect.Type, path string, quoted bool) (decodeFault, bool) {
	isNull := string(raw) == "null"
	for t.Kind() == reflect.Pointer {
		if isNull {
			return decodeFault{}, false
		}
		t = t.Elem()
	}
	if t.Implements(unmarshalerType) || reflect.PointerTo(t).Implements(unmarshalerType) || t.Kind() == reflect.Interface {
		return leaf(raw, t, path, false)
	}
	switch t.Kind() {
	case reflect.Struct:
		if isNull {
			return decodeFault{}, false
		}
		return locateObject(raw, path, func(key string) (reflect.Type, bool, bool) {
			f, ok := fieldNamed(t, key)
			if !ok {
				return nil, false, false
			}
			return f.Type, hasOption(f.Tag.Get("json"), "string"), true
		})
	case reflect.Map:
		if isNull || t.Key().Kind() != reflect.String {
			return leaf(raw, t, path, false)
		}
		return locateObject(raw, path, func(string) (reflect.Type, bool, bool) { return t.Elem(), false, true })
	case reflect.Slice, reflect.Array:
		if isNull || t.Elem().Kind() == reflect.Uint8 {
			return leaf(raw, t, path, false) // []byte is a base64 string
		}
		if len(raw) == 0 || raw[0] != '[' {
			return decodeFault{path: path, problem: "must be an array, got " + jsonKind(raw)}, true
		}
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			return decodeFault{}, false
		}
		for i, item := range items {
			if f, ok := locate(bytes.TrimSpace(item), t.Elem(), fmt.Sprintf("%s[%d]", path, i), false); ok {
				return f, true
			}
		}
		return decodeFault{}, false
	}
	return leaf(raw, t, path, quoted)
}

// locateObject walks the members of the object raw in order: field
// returns the type of a member, whether it is quoted, and whether the
// type has it at all.
func locateObject(raw []byte, path string, field func(string) (reflect.Type, bool, bool)) (decodeFault, bool) {
	if len(raw) == 0 || raw[0] != '{' {
		return decodeFault{path: path, problem: "must be an object, got " + jsonKind(raw)}, true
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if _, err := dec.Token(); err != nil {
		return decodeFault{}, false
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return decodeFault{}, false
		}
		key, _ := tok.(string)
		var member json.RawMessage
		if err := dec.Decode(&member); err != nil {
			return decodeFault{}, false
		}
		at := key
		if path != "" {
			at = path + "." + key
		}
		t, quoted, ok := field(key)
		if !ok {
			return decodeFault{path: at, unknown: true, problem: "unknown field"}, true
		}
		if f, ok := locate(bytes.TrimSpace(member), t, at, quoted); ok {
			return f, true
		}
	}
	return decodeFault{}, false
}

// apiError is the answer to f.
func (f decodeFault) apiError() *apiError {
	switch {
	case f.unknown:
		return &apiError{Status: http.StatusBadRequest, Code: CodeUnknownField, Field: f.path, Message: f.path + ": unknown field"}
	case f.path == "":
		return errorf(http.StatusBadRequest, CodeInvalidJSON, "the body %s", f.problem)
	}
	return fieldError(f.path, "%s", f.problem)
}

// leaf decodes raw into a t as encoding/json does, and says why it does
// not.
func leaf(raw []byte, t reflect.Type, path string, quoted bool) (decodeFault, bool) {
	if quoted {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return decodeFault{path: path, problem: fmt.Sprintf("must be a string holding %s, got %s", typeOf(t), jsonKind(raw))}, true
		}
		raw = []byte(s)
		if t.Kind() == reflect.String {
			raw = []byte(strconv.Quote(s))
		}
	}
	err := json.Unmarshal(raw, reflect.New(t).Interface())
	if err == nil {
		return decodeFault{}, false
	}
	var typ *json.UnmarshalTypeError
	switch {
	case quoted:
		return decodeFault{path: path, problem: fmt.Sprintf("must be a string holding %s, got %s", typeOf(t), raw)}, true
	case t == timeType:
		return decodeFault{path: path, problem: `must be a time in RFC 3339 form, such as "2026-01-02T15:04:05Z", got ` + string(raw)}, true
	case errors.As(err, &typ) && strings.HasPrefix(typ.Value, "number") && isInteger(t) && bytes.ContainsAny(raw, ".eE"):
		return decodeFault{path: path, problem: fmt.Sprintf("must be %s, a whole number in digits, got %s", typeOf(t), raw)}, true
	case errors.As(err, &typ) && strings.HasPrefix(typ.Value, "number") && isInteger(t):
		return decodeFault{path: path, problem: fmt.Sprintf("must be %s from %d to %d, got %s", typeOf(t), minOf(t), maxOf(t), raw)}, true
	case errors.As(err, &typ):
		return decodeFault{path: path, problem: fmt.Sprintf("must be %s, got %s", typeOf(t), typ.Value)}, true
	}
	return decodeFault{path: path, problem: err.Error()}, true
}

// fieldNamed returns the field of struct t that the JSON member key
// decodes into, as encoding/json finds it: by its tag's name or its own,
// exactly or else ignoring case, through embedded structs.
func fieldNamed(t reflect.Type, key string) (reflect.StructField, bool) {
	var fold *reflect.StructField
	for _, f := range reflect.VisibleFields(t) {
		if !f.IsExported() || f.Anonymous && f.Type.Kind() == reflect.Struct && f.Tag.Get("json") == "" {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if name == key {
			return f, true
		}
		if fold == nil && strings.EqualFold(name, key) {
			fold = &f
		}
	}
	if fold != nil {
		return *fold, true
	}
	return reflect.StructField{}, false
}

// hasOption reports whether a json tag has option opt.
func hasOption(tag, opt string) bool {
	_, opts, _ := strings.Cut(tag, ",")
	for o := range strings.SplitSeq(opts, ",") {
		if o == opt {
			return true
		}
	}
	return false
}

// jsonKind names the kind of the JSON value raw.
func jsonKind(raw []byte) string {
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "bool"
	case 'n':
		return "null"
	}
	return "number"
}

// typeOf names t as a message does: "an integer", "an object".
func typeOf(t reflect.Type) string {
	return typeName(&json.UnmarshalTypeError{Type: t})
}

func isInteger(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return true
	}
	return false
}

// minOf and maxOf are the bounds of integer type t.
func minOf(t reflect.Type) int64 {
	if t.Kind() >= reflect.Uint && t.Kind() <= reflect.Uint64 {
		return 0
	}
	return -1 << (t.Bits() - 1)
}

func maxOf(t reflect.Type) uint64 {
	if t.Kind() >= reflect.Uint && t.Kind() <= reflect.Uint64 {
		return 1<<t.Bits() - 1
	}
	return 1<<(t.Bits()-1) - 1
}
