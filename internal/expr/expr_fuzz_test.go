package expr

import (
	"encoding/json"
	"testing"
)

// FuzzExpr: Compile and Eval never panic on any condition and any input;
// what they cannot handle is an error.
func FuzzExpr(f *testing.F) {
	for _, s := range []struct{ src, input, dep string }{
		{`input.amount > 100`, `{"amount": 150}`, `{}`},
		{`deps.check.ok == true && input.region in ["eu", "us"]`, `{"region": "eu"}`, `{"ok": true}`},
		{`size(input.items) > 0`, `{"items": [1, 2]}`, `null`},
		{`input.x / 0 == 1`, `{"x": 1}`, `{}`},
		{`has(input.a.b) || input.s.startsWith("a\u0000")`, `{"a": {}}`, `[]`},
		{`int(input.n) == 9223372036854775807`, `{"n": 1e300}`, `"x"`},
		{`input.`, `{`, `{`},
		{`deps.missing.field`, `{}`, `{}`},
		{`"a" + 1`, `[]`, `1`},
	} {
		f.Add(s.src, []byte(s.input), []byte(s.dep))
	}
	f.Fuzz(func(t *testing.T, src string, input, dep []byte) {
		x, err := Compile(src)
		if err != nil {
			if x != nil {
				t.Fatalf("Compile(%q) returned an expression and an error", src)
			}
			return
		}
		if x.String() != src {
			t.Fatalf("String() = %q, want %q", x.String(), src)
		}
		deps := map[string]json.RawMessage{"check": dep, "dep": dep}
		_, _ = x.Eval(input, deps)
		_, _ = x.Eval(nil, nil)
	})
}
