package expr

import (
	"encoding/json"
	"fmt"
	"reflect"

	"cel.dev/cel-go/cel"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
)

// Value is a compiled expression that builds a JSON object (the input of a
// sub-workflow's child task) from the same variables as a condition. It is
// safe for concurrent use.
type Value struct {
	src string
	prg cel.Program
}

// CompileValue parses and checks src, which must yield a map, such as
// {"order": input.order, "price": deps.quote.amount}.
func CompileValue(src string) (*Value, error) {
	e, err := env()
	if err != nil {
		return nil, fmt.Errorf("expression environment: %w", err)
	}
	ast, iss := e.Compile(src)
	if iss.Err() != nil {
		return nil, fmt.Errorf("invalid expression %q: %w", src, iss.Err())
	}
	if t := ast.OutputType(); t.Kind() != cel.MapType(cel.StringType, cel.DynType).Kind() && t != cel.DynType {
		return nil, fmt.Errorf("expression %q yields %s, not a map", src, t)
	}
	prg, err := e.Program(ast, cel.CostLimit(costLimit))
	if err != nil {
		return nil, fmt.Errorf("expression %q: %w", src, err)
	}
	return &Value{src: src, prg: prg}, nil
}

// String returns the source of the expression.
func (x *Value) String() string { return x.src }

// Eval evaluates the expression on a task input and dependency results and
// returns the JSON object it yields.
func (x *Value) Eval(input json.RawMessage, deps map[string]json.RawMessage) (json.RawMessage, error) {
	vars, err := variables(input, deps)
	if err != nil {
		return nil, err
	}
	out, _, err := x.prg.Eval(vars)
	if err != nil {
		return nil, fmt.Errorf("evaluate %q: %w", x.src, err)
	}
	native, err := out.ConvertToNative(reflect.TypeFor[*structpb.Value]())
	if err != nil {
		return nil, fmt.Errorf("expression %q yielded %v, which is not JSON: %w", x.src, out.Value(), err)
	}
	v := native.(*structpb.Value)
	if _, ok := v.GetKind().(*structpb.Value_StructValue); !ok {
		return nil, fmt.Errorf("expression %q yielded %v, not an object", x.src, out.Value())
	}
	b, err := protojson.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("expression %q: encode its value: %w", x.src, err)
	}
	return b, nil
}
