package workflow

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/weftrun/weft/internal/duration"
	"go.yaml.in/yaml/v3"
)

// maxTemplateNodes bounds how many nodes a template may expand to through
// aliases and merge keys, so that "billion laughs" input fails fast. Only
// nodes reached through an alias or a merge count: a large template
// written out in full is bounded by its steps (limits.max_steps).
const maxTemplateNodes = 100_000

// Load reads and parses a template file. See Parse.
func Load(path string) (*Workflow, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		// As a problem of the template's: "FILE: what went wrong".
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return Parse(path, data)
}

// Parse reads one workflow version from a YAML template. filename is used in
// errors only.
//
// The template is a mapping with the keys namespace, name, version,
// description, identity, on_conflict (return, supersede), steps, templates
// (step templates for the items of batches, with the keys of a step),
// limits (max_decision_depth, max_steps, max_depth, max_children),
// concurrency (limit, key) and schedules (each with name, cron, time_zone,
// input, catch_up and max_catch_up); each step is a mapping with the keys
// name, handler, config (any mapping, kept as a JSON object), depends_on,
// retry (max_attempts, backoff, initial, max, jitter), timeout, priority,
// ttl, type (decision, converge, batch, signal, workflow), trigger_rule,
// when (a condition), worker (the template of a batch's items), signal
// (name, timeout), workflow and input (of a workflow step), concurrency
// (limit, key: a global limit of running steps), preemptible, rate_limit
// (limit, per, key: a global limit of claims per period) and
// circuit_breaker (failures, cooldown). See
// docs/workflows.md. Durations use Go syntax such as 10ms, 30s or 1m. A null value is the
// same as leaving the key out. Anchors, aliases and "<<" merge keys work.
//
// Every problem found, first in the YAML and then by Workflow.Validate, is
// returned joined; each is a *DefinitionError with filename and, where
// known, the line.
func Parse(filename string, data []byte) (*Workflow, error) {
	d := &templateDecoder{file: filename, budget: maxTemplateNodes}
	root := d.document(data)
	if root == nil {
		return nil, errors.Join(d.errs...)
	}
	w := &Workflow{source: filename}
	tplDecodeMapping(d, root, tplLoc{}, tplWorkflowFields, w)
	errs := d.errs
	if err := w.Validate(); err != nil {
		// A field the YAML could not give a value is left at its zero,
		// which validation would refuse again: say it once.
		undecoded := map[[2]string]bool{}
		for _, e := range d.errs {
			if de, ok := e.(*DefinitionError); ok && de.Field != "" {
				undecoded[[2]string{de.Step, de.Field}] = true
			}
		}
		vs := []error{err}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			vs = j.Unwrap()
		}
		for _, e := range vs {
			de, ok := e.(*DefinitionError)
			if ok && undecoded[[2]string{de.Step, de.Field}] {
				continue
			}
			if ok && de.Line == 0 && de.Step == "" {
				// Validation knows the field; the decoder saw its line.
				de.Line = d.lines[de.Field]
			}
			errs = append(errs, e)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return w, nil
}

// tplValue decodes one YAML value, reporting problems; ok is false if it
// could not.
type tplValue[V any] func(d *templateDecoder, n *yaml.Node, at tplLoc) (v V, ok bool)

// tplFieldDecoder decodes the value n of one key into *T.
type tplFieldDecoder[T any] func(d *templateDecoder, n *yaml.Node, at tplLoc, v *T)

// tplField makes a tplFieldDecoder from a value decoder and the field it fills.
func tplField[T, V any](dec tplValue[V], field func(*T) *V) tplFieldDecoder[T] {
	return func(d *templateDecoder, n *yaml.Node, at tplLoc, v *T) {
		if x, ok := dec(d, n, at); ok {
			*field(v) = x
		}
	}
}

var tplWorkflowFields = map[string]tplFieldDecoder[Workflow]{
	"namespace":   tplField((*templateDecoder).str, func(w *Workflow) *string { return &w.Namespace }),
	"name":        tplField((*templateDecoder).str, func(w *Workflow) *string { return &w.Name }),
	"version":     tplField((*templateDecoder).str, func(w *Workflow) *string { return &w.Version }),
	"description": tplField((*templateDecoder).str, func(w *Workflow) *string { return &w.Description }),
	"identity":    tplField(tplOneOf(IdentityUnique, IdentityStrict, IdentityCaller), func(w *Workflow) *Identity { return &w.Identity }),
	"on_conflict": tplField(tplOneOf(OnConflictReturn, OnConflictSupersede), func(w *Workflow) *OnConflict { return &w.OnConflict }),
	"steps":       tplField(tplList((*templateDecoder).step), func(w *Workflow) *[]Step { return &w.Steps }),
	"templates":   tplField(tplList((*templateDecoder).step), func(w *Workflow) *[]Step { return &w.Templates }),
	"limits": func(d *templateDecoder, n *yaml.Node, at tplLoc, w *Workflow) {
		tplDecodeMapping(d, n, at, tplLimitsFields, &w.Limits)
	},
	"schedules": tplField(tplList((*templateDecoder).schedule), func(w *Workflow) *[]Schedule { return &w.Schedules }),
	"concurrency": func(d *templateDecoder, n *yaml.Node, at tplLoc, w *Workflow) {
		w.Concurrency = &Concurrency{line: n.Line}
		tplDecodeMapping(d, n, at, tplConcurrencyFields, w.Concurrency)
	},
	"retention": func(d *templateDecoder, n *yaml.Node, at tplLoc, w *Workflow) {
		w.Retention = &Retention{}
		tplDecodeMapping(d, n, at, tplRetentionFields, w.Retention)
	},
}

var tplScheduleFields = map[string]tplFieldDecoder[Schedule]{
	"name":         tplField((*templateDecoder).str, func(s *Schedule) *string { return &s.Name }),
	"cron":         tplField((*templateDecoder).str, func(s *Schedule) *string { return &s.Cron }),
	"time_zone":    tplField((*templateDecoder).str, func(s *Schedule) *string { return &s.TimeZone }),
	"input":        tplField((*templateDecoder).config, func(s *Schedule) *json.RawMessage { return &s.Input }),
	"catch_up":     tplField(tplOneOf(CatchUpSkip, CatchUpLatest, CatchUpAll), func(s *Schedule) *CatchUp { return &s.CatchUp }),
	"max_catch_up": tplField(tplNumber(1, 1000), func(s *Schedule) *int { return &s.MaxCatchUp }),
}

// schedule decodes one schedule; its line is kept for Validate's errors.
func (d *templateDecoder) schedule(n *yaml.Node, at tplLoc) (Schedule, bool) {
	s := Schedule{line: n.Line}
	if d.want(n, at, yaml.MappingNode) == nil {
		return s, false
	}
	tplDecodeMapping(d, n, at, tplScheduleFields, &s)
	return s, true
}

var tplConcurrencyFields = map[string]tplFieldDecoder[Concurrency]{
	"limit": tplField(tplNumber(math.MinInt32, math.MaxInt32), func(c *Concurrency) *int { return &c.Limit }),
	"key": func(d *templateDecoder, n *yaml.Node, at tplLoc, c *Concurrency) {
		c.keyLine = n.Line
		if v, ok := d.str(n, at); ok {
			c.Key = v
		}
	},
}

var tplLimitsFields = map[string]tplFieldDecoder[Limits]{
	"max_decision_depth": tplField(tplNumber(1, math.MaxInt), func(l *Limits) *int { return &l.MaxDecisionDepth }),
	"max_steps":          tplField(tplNumber(1, math.MaxInt), func(l *Limits) *int { return &l.MaxSteps }),
	"max_depth":          tplField(tplNumber(1, MaxDepthLimit), func(l *Limits) *int { return &l.MaxDepth }),
	"max_children":       tplField(tplNumber(1, MaxChildrenLimit), func(l *Limits) *int { return &l.MaxChildren }),
}

var tplSignalFields = map[string]tplFieldDecoder[SignalWait]{
	"name":    tplField((*templateDecoder).str, func(w *SignalWait) *string { return &w.Name }),
	"timeout": tplField((*templateDecoder).duration, func(w *SignalWait) *Duration { return &w.Timeout }),
}

var tplStepFields = map[string]tplFieldDecoder[Step]{
	"name":       tplField((*templateDecoder).str, func(s *Step) *string { return &s.Name }),
	"handler":    tplField((*templateDecoder).str, func(s *Step) *string { return &s.Handler }),
	"config":     tplField((*templateDecoder).config, func(s *Step) *json.RawMessage { return &s.Config }),
	"depends_on": tplField(tplList((*templateDecoder).str), func(s *Step) *[]string { return &s.DependsOn }),
	"timeout":    tplField((*templateDecoder).duration, func(s *Step) *Duration { return &s.Timeout }),
	"priority":   tplField(tplNumber(math.MinInt, math.MaxInt), func(s *Step) *int { return &s.Priority }),
	"ttl":        tplField((*templateDecoder).duration, func(s *Step) *Duration { return &s.TTL }),
	"retry": func(d *templateDecoder, n *yaml.Node, at tplLoc, s *Step) {
		tplDecodeMapping(d, n, at, tplRetryFields, &s.Retry)
	},
	"type":         tplField(tplOneOf(StepDecision, StepConverge, StepBatch, StepSignal, StepWorkflow, StepFunction), func(s *Step) *StepType { return &s.Type }),
	"workflow":     tplField((*templateDecoder).str, func(s *Step) *string { return &s.Workflow }),
	"input":        tplField((*templateDecoder).str, func(s *Step) *string { return &s.Input }),
	"trigger_rule": tplField(tplOneOf(AllSuccess, AllDone, OneSuccess, OneFailed, AllFailed, NoneFailed, NoneFailedMinOneSuccess, Always), func(s *Step) *TriggerRule { return &s.TriggerRule }),
	"when":         tplField((*templateDecoder).str, func(s *Step) *string { return &s.When }),
	"worker":       tplField((*templateDecoder).str, func(s *Step) *string { return &s.Worker }),
	"preemptible":  tplField((*templateDecoder).boolean, func(s *Step) *bool { return &s.Preemptible }),
	"signal": func(d *templateDecoder, n *yaml.Node, at tplLoc, s *Step) {
		s.Signal = &SignalWait{}
		tplDecodeMapping(d, n, at, tplSignalFields, s.Signal)
	},
	"concurrency": func(d *templateDecoder, n *yaml.Node, at tplLoc, s *Step) {
		s.Concurrency = &Concurrency{line: n.Line}
		tplDecodeMapping(d, n, at, tplConcurrencyFields, s.Concurrency)
	},
	"rate_limit": func(d *templateDecoder, n *yaml.Node, at tplLoc, s *Step) {
		s.RateLimit = &RateLimit{line: n.Line}
		tplDecodeMapping(d, n, at, tplRateLimitFields, s.RateLimit)
	},
	"circuit_breaker": func(d *templateDecoder, n *yaml.Node, at tplLoc, s *Step) {
		s.CircuitBreaker = &CircuitBreaker{line: n.Line}
		tplDecodeMapping(d, n, at, tplBreakerFields, s.CircuitBreaker)
	},
}

var tplBreakerFields = map[string]tplFieldDecoder[CircuitBreaker]{
	"failures": tplField(tplNumber(math.MinInt32, math.MaxInt32), func(b *CircuitBreaker) *int { return &b.Failures }),
	"cooldown": tplField((*templateDecoder).duration, func(b *CircuitBreaker) *Duration { return &b.Cooldown }),
}

var tplRateLimitFields = map[string]tplFieldDecoder[RateLimit]{
	"limit": tplField(tplNumber(math.MinInt32, math.MaxInt32), func(r *RateLimit) *int { return &r.Limit }),
	"per": func(d *templateDecoder, n *yaml.Node, at tplLoc, r *RateLimit) {
		v, ok := d.duration(n, at)
		r.Per, r.perReported, r.perGiven = v, !ok, ok // a bad value is reported once, here
	},
	"key": func(d *templateDecoder, n *yaml.Node, at tplLoc, r *RateLimit) {
		r.keyLine = n.Line
		if v, ok := d.str(n, at); ok {
			r.Key = v
		}
	},
}

var tplRetryFields = map[string]tplFieldDecoder[RetryPolicy]{
	"max_attempts": tplField(tplNumber(1, math.MaxInt), func(r *RetryPolicy) *int { return &r.MaxAttempts }),
	"backoff":      tplField(tplOneOf("exponential", "fixed", "linear"), func(r *RetryPolicy) *string { return &r.Backoff }),
	"initial":      tplField((*templateDecoder).duration, func(r *RetryPolicy) *Duration { return &r.Initial }),
	"max":          tplField((*templateDecoder).duration, func(r *RetryPolicy) *Duration { return &r.Max }),
	"jitter": func(d *templateDecoder, n *yaml.Node, at tplLoc, r *RetryPolicy) {
		if f, ok := tplNumber(0.0, 1.0)(d, n, at); ok {
			r.Jitter = &f
		}
	},
}

// tplDecodeMapping decodes mapping n into v, key by key, through fields.
func tplDecodeMapping[T any](d *templateDecoder, n *yaml.Node, at tplLoc, fields map[string]tplFieldDecoder[T], v *T) {
	if n = d.want(n, at, yaml.MappingNode); n == nil {
		return
	}
	for _, kv := range d.pairs(n, at) {
		key, val := kv[0].Value, tplResolve(kv[1])
		if at.step == "" {
			// The workflow's own keys: its steps know their lines.
			if d.lines == nil {
				d.lines = map[string]int{}
			}
			if f := at.sub(key).field; d.lines[f] == 0 {
				d.lines[f] = kv[0].Line
			}
		}
		if dec, ok := fields[key]; !ok {
			d.errorf(kv[0], at, "unknown key %q", key)
		} else if val.Kind != yaml.ScalarNode || val.ShortTag() != "!!null" {
			dec(d, val, at.sub(key), v)
		}
	}
}

// tplList decodes a list with elem, keeping the items that decode.
func tplList[V any](elem tplValue[V]) tplValue[[]V] {
	return func(d *templateDecoder, n *yaml.Node, at tplLoc) ([]V, bool) {
		if n = d.want(n, at, yaml.SequenceNode); n == nil {
			return nil, false
		}
		out := make([]V, 0, len(n.Content))
		for i, item := range n.Content {
			if v, ok := elem(d, item, at.index(i)); ok {
				out = append(out, v)
			}
		}
		return out, true
	}
}

// tplLoc says where a value sits: in which step, under which key path.
type tplLoc struct{ step, field string }

func (l tplLoc) sub(key string) tplLoc {
	return tplLoc{l.step, strings.TrimPrefix(l.field+"."+key, ".")}
}

func (l tplLoc) index(i int) tplLoc { return tplLoc{l.step, fmt.Sprintf("%s[%d]", l.field, i)} }

// templateDecoder walks a template's node tree and collects every problem.
type templateDecoder struct {
	file   string
	errs   []error
	budget int // nodes left to expand through aliases and merges
	// aliased counts the aliases the walk is inside: their nodes spend
	// the budget.
	aliased int
	// lines has the line of each key of the workflow's own decoded, by
	// field path: where a validation error of the field points.
	lines map[string]int
}

func (d *templateDecoder) errorf(n *yaml.Node, at tplLoc, format string, args ...any) {
	d.errs = append(d.errs, &DefinitionError{File: d.file, Line: n.Line, Step: at.step, Field: at.field, Msg: fmt.Sprintf(format, args...)})
}

var tplYAMLError = regexp.MustCompile(`^(?:yaml: )?(?:line (\d+): )?`)

// document returns the template's single top-level mapping, or nil after
// reporting why there is none.
func (d *templateDecoder) document(data []byte) *yaml.Node {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc, next yaml.Node
	err := dec.Decode(&doc)
	if err == nil {
		err = dec.Decode(&next)
	}
	switch {
	case err == nil:
		d.errorf(&next, tplLoc{}, "a template holds one YAML document; put each workflow version in its own file")
	case !errors.Is(err, io.EOF):
		m := tplYAMLError.FindStringSubmatch(err.Error()) // always matches
		line, _ := strconv.Atoi(m[1])
		d.errorf(&yaml.Node{Line: line}, tplLoc{}, "invalid YAML: %s", err.Error()[len(m[0]):])
	case len(doc.Content) == 0 || tplResolve(doc.Content[0]).ShortTag() == "!!null":
		d.errorf(&yaml.Node{}, tplLoc{}, "template is empty")
	default:
		return d.want(doc.Content[0], tplLoc{field: "top level"}, yaml.MappingNode)
	}
	return nil
}

// tplResolve follows an alias to the node it names.
func tplResolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// tplDescribe names n's type, and its text if it is a scalar, for errors.
func tplDescribe(n *yaml.Node) string {
	kind := map[string]string{
		"!!map": "a mapping", "!!seq": "a list", "!!str": "a string", "!!int": "an integer",
		"!!float": "a number", "!!bool": "a boolean", "!!null": "null",
	}[n.ShortTag()]
	if n.Kind == yaml.ScalarNode {
		return strings.TrimSpace(fmt.Sprintf("%s %q", kind, n.Value))
	}
	return kind
}

// spend uses up one node of the expansion budget, reporting when it runs out.
func (d *templateDecoder) spend(n *yaml.Node, at tplLoc) bool {
	if d.budget--; d.budget == -1 {
		d.errorf(n, at, "template expands to more than %d nodes through aliases", maxTemplateNodes)
	}
	return d.budget >= 0
}

// want returns n, resolved, if it is of the given kind; otherwise it
// reports a type error and returns nil.
func (d *templateDecoder) want(n *yaml.Node, at tplLoc, kind yaml.Kind) *yaml.Node {
	if n = tplResolve(n); n.Kind == kind {
		return n
	}
	want := map[yaml.Kind]string{yaml.MappingNode: "a mapping", yaml.SequenceNode: "a list", yaml.ScalarNode: "a string"}[kind]
	d.errorf(n, at, "must be %s, got %s", want, tplDescribe(n))
	return nil
}

// pairs lists mapping n's key/value pairs, reporting duplicate keys and
// expanding "<<" merge keys (keys written in n win over merged ones).
func (d *templateDecoder) pairs(n *yaml.Node, at tplLoc) [][2]*yaml.Node {
	var own, merged [][2]*yaml.Node
	keys := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := tplResolve(n.Content[i]), n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			srcs := []*yaml.Node{v}
			if r := tplResolve(v); r.Kind == yaml.SequenceNode {
				srcs = r.Content
			}
			for _, src := range srcs {
				if m := d.want(src, at.sub("<<"), yaml.MappingNode); m != nil && d.spend(src, at) {
					merged = append(merged, d.pairs(m, at)...)
				}
			}
		} else if keys[k.Value] {
			d.errorf(k, at, "duplicate key %q", k.Value)
		} else {
			keys[k.Value] = true
			own = append(own, [2]*yaml.Node{k, v})
		}
	}
	for _, kv := range merged {
		if !keys[kv[0].Value] {
			keys[kv[0].Value] = true
			own = append(own, kv)
		}
	}
	return own
}

func (d *templateDecoder) boolean(n *yaml.Node, at tplLoc) (bool, bool) {
	var v bool
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" || n.Decode(&v) != nil {
		d.errorf(n, at, "must be true or false, got %s", tplDescribe(n))
		return false, false
	}
	return v, true
}

func (d *templateDecoder) str(n *yaml.Node, at tplLoc) (string, bool) {
	if n = d.want(n, at, yaml.ScalarNode); n == nil {
		return "", false
	}
	return n.Value, true // the source text: version 1.10 stays "1.10"
}

func tplOneOf[S ~string](allowed ...S) tplValue[S] {
	return func(d *templateDecoder, n *yaml.Node, at tplLoc) (S, bool) {
		s, ok := d.str(n, at)
		if ok && !slices.Contains(allowed, S(s)) {
			d.errorf(n, at, "%q is not one of %v", s, allowed)
			ok = false
		}
		return S(s), ok
	}
}

// tplNumber decodes an integer or, if N is float64, any number, in [lo, hi].
func tplNumber[N int | float64](lo, hi N) tplValue[N] {
	return func(d *templateDecoder, n *yaml.Node, at tplLoc) (N, bool) {
		var v N
		_, isInt := any(v).(int)
		want := map[bool]string{true: "an integer", false: "a number"}[isInt]
		switch t := n.ShortTag(); {
		case n.Kind != yaml.ScalarNode || t != "!!int" && (isInt || t != "!!float") || n.Decode(&v) != nil:
			d.errorf(n, at, "must be %s, got %s", want, tplDescribe(n))
		case !(v >= lo):
			d.errorf(n, at, "must be at least %v, got %s", lo, n.Value)
		case v > hi:
			d.errorf(n, at, "must be at most %v, got %s", hi, n.Value)
		default:
			return v, true
		}
		return v, false
	}
}

func (d *templateDecoder) duration(n *yaml.Node, at tplLoc) (Duration, bool) {
	s, ok := d.str(n, at)
	v, err := duration.Parse(s)
	if ok && err != nil {
		d.errorf(n, at, "%v", err)
	}
	return Duration(v), ok && err == nil
}

// step decodes one step. Errors name it, or give its place in the list
// if it has no name.
func (d *templateDecoder) step(n *yaml.Node, at tplLoc) (Step, bool) {
	s := Step{line: n.Line}
	m := d.want(n, at, yaml.MappingNode)
	if m == nil {
		return s, false
	}
	for j := 0; j+1 < len(m.Content); j += 2 {
		if k, v := tplResolve(m.Content[j]), tplResolve(m.Content[j+1]); k.Value == "name" && v.Kind == yaml.ScalarNode && v.Value != "" {
			at = tplLoc{step: v.Value}
		}
	}
	tplDecodeMapping(d, m, at, tplStepFields, &s)
	return s, true
}

// config converts a mapping to a JSON object, keeping key order, integers
// and the text of numbers that are valid JSON.
func (d *templateDecoder) config(n *yaml.Node, at tplLoc) (json.RawMessage, bool) {
	var b bytes.Buffer
	if d.want(n, at, yaml.MappingNode) == nil || !d.toJSON(&b, n, at) {
		return nil, false
	}
	return b.Bytes(), true
}

func (d *templateDecoder) toJSON(b *bytes.Buffer, n *yaml.Node, at tplLoc) bool {
	if n.Kind == yaml.AliasNode {
		d.aliased++
		defer func() { d.aliased-- }()
	}
	if n = tplResolve(n); d.aliased > 0 && !d.spend(n, at) {
		return false
	}
	ok := true
	switch n.Kind {
	case yaml.MappingNode:
		b.WriteByte('{')
		for i, kv := range d.pairs(n, at) {
			if kv[0].Kind != yaml.ScalarNode || kv[0].ShortTag() != "!!str" {
				d.errorf(kv[0], at, "keys must be strings, got %s", tplDescribe(kv[0]))
				ok = false
				continue
			}
			if i > 0 {
				b.WriteByte(',')
			}
			ok = tplWriteJSON(b, kv[0].Value) == nil && ok
			b.WriteByte(':')
			ok = d.toJSON(b, kv[1], at.sub(kv[0].Value)) && ok
		}
		b.WriteByte('}')
	case yaml.SequenceNode:
		b.WriteByte('[')
		for i, item := range n.Content {
			if i > 0 {
				b.WriteByte(',')
			}
			ok = d.toJSON(b, item, at.index(i)) && ok
		}
		b.WriteByte(']')
	default:
		var v any = n.Value // strings, and the text of timestamps, binary and custom tags
		switch t := n.ShortTag(); {
		case (t == "!!int" || t == "!!float") && strings.IndexAny(n.Value, "-0123456789") == 0 && json.Valid([]byte(n.Value)):
			b.WriteString(n.Value) // a JSON number as written: 1.0 stays 1.0
			return true
		case t == "!!int" || t == "!!float" || t == "!!bool" || t == "!!null":
			if n.Decode(&v) != nil {
				v = math.NaN() // not representable either way
			}
		}
		if tplWriteJSON(b, v) != nil {
			d.errorf(n, at, "%s cannot be represented in JSON", tplDescribe(n))
			return false
		}
	}
	return ok
}

// tplWriteJSON appends v as JSON without escaping <, > and &.
func tplWriteJSON(b *bytes.Buffer, v any) error {
	e := json.NewEncoder(b)
	e.SetEscapeHTML(false)
	if err := e.Encode(v); err != nil {
		return err
	}
	b.Truncate(b.Len() - 1) // Encode's newline
	return nil
}
