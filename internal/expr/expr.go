// Package expr compiles and evaluates the conditions of steps (the "when"
// key of a template) and the inputs of sub-workflow steps (their "input"
// key): expressions in the Common Expression Language (CEL) over the task
// input and the results of a step's dependencies, which must yield a
// boolean (Expr) or a map (Value).
//
// CEL is not Turing-complete and has no side effects: an expression cannot
// loop forever, reach the file system or the network, or run code. Every
// evaluation is also bounded by a cost limit.
//
// Variables:
//
//	input   the task's JSON input
//	deps    the results of the step's dependencies by step name
//	        (deps.check.ok, or deps["check-2"].ok for names that are not
//	        identifiers); a dependency that did not run is absent
//
// JSON numbers are doubles, and compare with integers as numbers
// (input.amount > 1000). has(input.x) tests whether a key exists; reading
// a missing key is an error.
package expr

import (
	"encoding/json"
	"fmt"
	"strconv"

	"cel.dev/cel-go/cel"
)

// costLimit bounds the work of one evaluation (in CEL's cost units).
const costLimit = 100_000

// Expr is a compiled condition. It is safe for concurrent use.
type Expr struct {
	src string
	prg cel.Program
}

func env() (*cel.Env, error) {
	return cel.NewEnv(
		cel.Variable("input", cel.DynType),
		cel.Variable("deps", cel.MapType(cel.StringType, cel.DynType)),
	)
}

// Compile parses and checks src. The error says where the problem is.
func Compile(src string) (*Expr, error) {
	e, err := env()
	if err != nil {
		return nil, fmt.Errorf("expression environment: %w", err)
	}
	ast, iss := e.Compile(src)
	if iss.Err() != nil {
		return nil, fmt.Errorf("invalid expression %q: %w", src, iss.Err())
	}
	if t := ast.OutputType(); t != cel.BoolType && t != cel.DynType {
		return nil, fmt.Errorf("expression %q yields %s, not a boolean", src, t)
	}
	prg, err := e.Program(ast, cel.CostLimit(costLimit))
	if err != nil {
		return nil, fmt.Errorf("expression %q: %w", src, err)
	}
	return &Expr{src: src, prg: prg}, nil
}

// String returns the source of the expression.
func (x *Expr) String() string { return x.src }

// Eval evaluates the expression on a task input and dependency results.
func (x *Expr) Eval(input json.RawMessage, deps map[string]json.RawMessage) (bool, error) {
	vars, err := variables(input, deps)
	if err != nil {
		return false, err
	}
	out, _, err := x.prg.Eval(vars)
	if err != nil {
		return false, fmt.Errorf("evaluate %q: %w", x.src, err)
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, fmt.Errorf("expression %q yielded %v, not a boolean", x.src, out.Value())
	}
	return b, nil
}

// variables decodes the task input and dependency results into the
// expressions' variables.
func variables(input json.RawMessage, deps map[string]json.RawMessage) (map[string]any, error) {
	var in any
	if len(input) > 0 {
		if err := json.Unmarshal(input, &in); err != nil {
			return nil, fmt.Errorf("decode input: %w", err)
		}
	}
	ds := make(map[string]any, len(deps))
	for name, raw := range deps {
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, fmt.Errorf("decode result of %q: %w", name, err)
		}
		ds[name] = v
	}
	return map[string]any{"input": in, "deps": ds}, nil
}

// Key is a compiled key expression (the "key" of a concurrency limit): a
// CEL expression over the task input alone whose value, a string, number
// or boolean, names the part of a limit a task falls in. It is safe for
// concurrent use.
type Key struct {
	src string
	prg cel.Program
}

// maxKeyBytes bounds a key's value, which the database stores on each step.
const maxKeyBytes = 200

// CompileKey parses and checks a key expression. The error says where the
// problem is.
func CompileKey(src string) (*Key, error) {
	e, err := cel.NewEnv(cel.Variable("input", cel.DynType))
	if err != nil {
		return nil, fmt.Errorf("expression environment: %w", err)
	}
	ast, iss := e.Compile(src)
	if iss.Err() != nil {
		return nil, fmt.Errorf("invalid key expression %q: %w", src, iss.Err())
	}
	switch t := ast.OutputType(); t {
	case cel.StringType, cel.IntType, cel.UintType, cel.DoubleType, cel.BoolType, cel.DynType:
	default:
		return nil, fmt.Errorf("key expression %q yields %s, not a string, number or boolean", src, t)
	}
	prg, err := e.Program(ast, cel.CostLimit(costLimit))
	if err != nil {
		return nil, fmt.Errorf("key expression %q: %w", src, err)
	}
	return &Key{src: src, prg: prg}, nil
}

// String returns the source of the expression.
func (k *Key) String() string { return k.src }

// Eval computes the key of a task input.
func (k *Key) Eval(input json.RawMessage) (string, error) {
	var in any
	if len(input) > 0 {
		if err := json.Unmarshal(input, &in); err != nil {
			return "", fmt.Errorf("decode input: %w", err)
		}
	}
	out, _, err := k.prg.Eval(map[string]any{"input": in})
	if err != nil {
		return "", fmt.Errorf("evaluate key %q: %w", k.src, err)
	}
	var v string
	switch x := out.Value().(type) {
	case string:
		v = x
	case bool, int64, uint64:
		v = fmt.Sprint(x)
	case float64:
		v = strconv.FormatFloat(x, 'f', -1, 64)
	default:
		return "", fmt.Errorf("key %q yielded %v, not a string, number or boolean", k.src, out.Value())
	}
	if len(v) > maxKeyBytes {
		return "", fmt.Errorf("key %q yielded %d bytes, more than %d", k.src, len(v), maxKeyBytes)
	}
	return v, nil
}
