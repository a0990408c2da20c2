package config

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
)

// Setting is one configurable value of the weft command: one key in the
// file, one environment variable and, for most, one flag.
type Setting struct {
	Key    string // in the configuration file
	Flag   string // the flag that sets it; "" for settings read from the environment only
	Env    string // the environment variable that sets it
	Kind   Kind
	Secret bool // shown redacted
	// Commands are the commands whose flag the setting sets; nil: every
	// command that has the flag (the global flags). Another command may
	// have a flag of the same name that means something else ('weft
	// limit --concurrency').
	Commands []string
}

// AppliesTo reports whether the setting sets the flag of the command
// named name.
func (s Setting) AppliesTo(name string) bool {
	return s.Commands == nil || slices.Contains(s.Commands, name)
}

// Resolved is a setting's effective value and where it came from.
type Resolved struct {
	Setting
	Items    []string // nil: not set (the default applies)
	Source   string   // "default", "flag --x", "env X" or "FILE:LINE"
	FromFile bool     // made by a ${file:} interpolation
	// Text holds the items as the configuration file writes them, before
	// interpolation; nil when the file did not set the value.
	Text []string
}

// Show renders the value v of the setting for an error message. A value
// from the configuration file may be interpolated, from a file
// (${file:PATH}) or a variable (${VAR}) that holds a secret: it shows as
// the file writes it, naming the reference and never what that held
// ("${file:/etc/shadow}"); the text of the item that is v, else of every
// item. A secret setting shows as [redacted]. Any other value (a flag, an
// environment variable, the default) shows as it is. Every error about a
// setting's value quotes it through Show.
func (r *Resolved) Show(v string) string {
	switch {
	case r == nil:
		return v
	case r.Secret && r.Items != nil:
		return "[redacted]"
	case r.Text == nil:
		return v
	}
	if i := slices.Index(r.Items, v); i >= 0 {
		return r.Text[i]
	}
	return strings.Join(r.Text, ",")
}

// Layers are the settings resolved: defaults < the configuration file <
// the environment < flags.
type Layers struct {
	File     string // the configuration file read, "" for none
	Settings []Resolved
	byEnv    map[string]*Resolved
	getenv   func(string) string
	command  string // the command resolved for
}

// Resolve reads the configuration file at path (its absence is an error
// only where explicit) and resolves every setting for the command named
// command: its flag where the command line set it, else its environment
// variable, else the file. It sets the flags of flags that the environment
// or the file set and the command line did not. removed are keys the file
// no longer takes, with what replaced each: a file that has one is
// refused with that.
func Resolve(path string, explicit bool, settings []Setting, removed map[string]string, flags *pflag.FlagSet, command string, getenv func(string) string) (*Layers, error) {
	schema := map[string]Kind{}
	for _, s := range settings {
		schema[s.Key] = s.Kind
	}
	for key := range removed {
		schema[key] = Map // read, to be refused with what replaced it
	}
	file := map[string]Value{}
	c := &Layers{byEnv: map[string]*Resolved{}, getenv: getenv, command: command}
	switch v, err := Load(path, schema, getenv); {
	case err == nil:
		file, c.File = v, path
	case errors.Is(err, os.ErrNotExist) && !explicit:
	case errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("configuration file %s does not exist", path)
	default:
		return nil, err
	}
	for key, instead := range removed {
		if v, ok := file[key]; ok {
			return nil, fmt.Errorf("%s: %s was removed: %s", v.Where(), key, instead)
		}
	}
	c.Settings = make([]Resolved, len(settings))
	for i, s := range settings {
		r := &c.Settings[i]
		r.Setting, r.Source = s, "default"
		var f *pflag.Flag
		if s.Flag != "" && s.AppliesTo(command) {
			f = flags.Lookup(s.Flag)
		}
		switch v, inFile := file[s.Key]; {
		case f != nil && f.Changed:
			r.Source = "flag --" + s.Flag
			r.Items = flagItems(f)
		case getenv(s.Env) != "":
			r.Source, r.Items = "env "+s.Env, []string{getenv(s.Env)}
		case inFile:
			r.Source, r.Items, r.FromFile, r.Text = v.Where(), v.Items, v.FromFile, v.Text
		}
		c.byEnv[s.Env] = r
		if f == nil || f.Changed || r.Items == nil {
			continue
		}
		for _, item := range r.Items {
			if err := flags.Set(s.Flag, item); err != nil {
				// Not err, which quotes the value.
				return nil, fmt.Errorf("%s (%s): invalid argument %q for --%s: %s", s.Key, r.Source, r.Show(item), s.Flag, refusal(f.Value.Type(), err))
			}
		}
	}
	return c, nil
}

// refusal says why a flag of type typ refused a value with err, without
// quoting the value.
func refusal(typ string, err error) string {
	if errors.Is(err, strconv.ErrRange) {
		return "out of range"
	}
	switch typ {
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
		return "want an integer"
	case "float32", "float64":
		return "want a number"
	case "duration":
		return `want a duration such as "30s"`
	case "bool":
		return "want true or false"
	case "stringSlice", "stringArray":
		return "want a comma-separated list"
	}
	return "want a value of type " + typ
}

// flagItems returns a flag's value as items.
func flagItems(f *pflag.Flag) []string {
	if sv, ok := f.Value.(pflag.SliceValue); ok {
		return sv.GetSlice()
	}
	return []string{f.Value.String()}
}

// Env returns the value the environment or the file gives the setting of
// environment variable name, and for a variable that is no setting, the
// environment's: what the OTEL_* variables are read through.
func (c *Layers) Env(name string) string {
	r, ok := c.byEnv[name]
	switch {
	case !ok:
		return c.getenv(name)
	case len(r.Items) > 0:
		return strings.Join(r.Items, ",")
	}
	return ""
}

// FromFile reports whether the setting of environment variable name came
// from the configuration file rather than the environment.
func (c *Layers) FromFile(name string) bool {
	r := c.byEnv[name]
	return r != nil && len(r.Items) > 0 && !strings.HasPrefix(r.Source, "env ")
}

// Show renders the value v of the setting named name (its key, flag or
// environment variable) for an error message: see Resolved.Show. A name
// that is no setting shows v as it is. c may be nil.
func (c *Layers) Show(name, v string) string {
	return c.lookup(name).Show(v)
}

// lookup returns the setting named name: its key, its environment
// variable or, for the command resolved, its flag; nil for none.
func (c *Layers) lookup(name string) *Resolved {
	if c == nil {
		return nil
	}
	for i := range c.Settings {
		r := &c.Settings[i]
		if r.Key == name || r.Env == name || (r.Flag == name && r.Flag != "" && r.AppliesTo(c.command)) {
			return r
		}
	}
	return nil
}

// Source returns where the setting of key came from: "flag --x", "env
// X", "FILE:LINE", or "" when nothing set it.
func (c *Layers) Source(key string) string {
	for _, r := range c.Settings {
		if r.Key == key && r.Items != nil {
			return r.Source
		}
	}
	return ""
}

// Describe names the flag for an error about its value: "--flag", with
// the setting and where it came from when that was not the command line
// ("--lease-ttl (engine.lease_ttl at weft.yaml:4)"). c may be nil.
func (c *Layers) Describe(flag string) string {
	switch r := c.lookup(flag); {
	case r == nil || r.Flag != flag || r.Items == nil || strings.HasPrefix(r.Source, "flag "):
		return "--" + flag
	case strings.HasPrefix(r.Source, "env "):
		return fmt.Sprintf("--%s (%s, from %s)", flag, r.Key, r.Source)
	default:
		return fmt.Sprintf("--%s (%s at %s)", flag, r.Key, r.Source)
	}
}
