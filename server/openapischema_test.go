package server_test

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/server"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/wire"
)

// schemaNode is the part of a JSON Schema the checks below read.
type schemaNode struct {
	Ref                  string                 `json:"$ref"`
	Type                 string                 `json:"type"`
	Format               string                 `json:"format"`
	Nullable             bool                   `json:"nullable"`
	Enum                 []any                  `json:"enum"`
	Properties           map[string]*schemaNode `json:"properties"`
	Required             []string               `json:"required"`
	Items                *schemaNode            `json:"items"`
	AdditionalProperties json.RawMessage        `json:"additionalProperties"`
	OneOf                []*schemaNode          `json:"oneOf"`
	AllOf                []*schemaNode          `json:"allOf"`
}

type openAPIDoc struct {
	Components struct {
		Schemas map[string]*schemaNode `json:"schemas"`
	} `json:"components"`
}

func loadOpenAPI(t *testing.T) openAPIDoc {
	t.Helper()
	data, err := os.ReadFile("openapi.json")
	require.NoError(t, err)
	var doc openAPIDoc
	require.NoError(t, json.Unmarshal(data, &doc))
	return doc
}

// wireSchemas are the wire types the document's components describe, by
// component name: every component is one of them.
var wireSchemas = map[string]any{
	"Readiness": wire.Readiness{}, "ErrorBody": wire.ErrorBody{}, "Error": wire.Error{}, "Problem": wire.Problem{},
	"TemplateRequest": wire.TemplateRequest{}, "Validation": wire.Validation{}, "Workflow": wire.Workflow{},
	"SubmitRequest": wire.SubmitRequest{}, "SubmitResponse": wire.SubmitResponse{}, "SubmitBatch": wire.SubmitBatch{}, "SubmittedBatch": wire.SubmittedBatch{},
	"Task": wire.Task{}, "TaskList": wire.TaskList{}, "Step": wire.Step{}, "AuditEntry": wire.AuditEntry{},
	"TaskAction": wire.TaskAction{}, "SignalRequest": wire.SignalRequest{}, "SignalResult": wire.SignalResult{},
	"StepAction": wire.StepAction{}, "CompleteStep": wire.CompleteStep{},
	"RegisterWorker": wire.RegisterWorker{}, "WorkerRegistered": wire.WorkerRegistered{},
	"ClaimRequest": wire.ClaimRequest{}, "Fence": wire.Fence{}, "ClaimedStep": wire.ClaimedStep{},
	"Heartbeat": wire.Heartbeat{}, "Complete": wire.Complete{}, "Fail": wire.Fail{},
	"Calls": wire.Calls{}, "Call": wire.Call{}, "RecordedCall": wire.RecordedCall{},
	"Checkpoint": wire.Checkpoint{}, "Reported": wire.Reported{}, "Progress": wire.Progress{},
	"Event": wire.Event{}, "CreateWebhook": wire.CreateWebhook{}, "Webhook": wire.Webhook{}, "WebhookList": wire.WebhookList{},
	"Schedule": wire.Schedule{}, "ScheduleAuditEntry": wire.ScheduleAuditEntry{}, "ScheduleDetail": wire.ScheduleDetail{},
	"Policy": wire.Policy{}, "LimitUsage": wire.LimitUsage{}, "PolicyReport": wire.PolicyReport{},
	"PolicyChange": wire.PolicyChange{}, "PolicyChangeRecord": wire.PolicyChangeRecord{}, "PolicyChanges": wire.PolicyChanges{},
	"TaskFilter": wire.TaskFilter{}, "BulkRequest": wire.BulkRequest{}, "BulkResult": wire.BulkResult{},
	"PruneRequest": wire.PruneRequest{}, "Retention": wire.Retention{}, "RetentionSetting": wire.RetentionSetting{}, "RetentionList": wire.RetentionList{},
	"WorkerList": wire.WorkerList{}, "OperatorLog": wire.OperatorLog{}, "RateUsage": wire.RateUsage{},
	"Breaker": wire.Breaker{}, "BreakerReset": wire.BreakerReset{}, "Preempt": wire.Preempt{},
	"WorkflowList": wire.WorkflowList{}, "AuditList": wire.AuditList{}, "ClaimResponse": wire.ClaimResponse{},
	"HeartbeatResponse": wire.HeartbeatResponse{}, "ScheduleList": wire.ScheduleList{},
}

// TestOpenAPISchemasMatchWire checks each component of openapi.json
// against the wire type it describes: the same properties and a type that
// fits the Go field's. A component the server sends has required exactly
// where the field is always sent (no omitempty); one only sent to the
// server (a request body) requires fields of its type, and which ones is
// the server's rule (the contract test holds it to the document).
func TestOpenAPISchemasMatchWire(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t)
	requests := requestOnly(t)
	var problems []string
	for name := range doc.Components.Schemas {
		if _, ok := wireSchemas[name]; !ok && name != "Duration" {
			problems = append(problems, fmt.Sprintf("component %s describes no wire type", name))
		}
	}
	for name, v := range wireSchemas {
		s, ok := doc.Components.Schemas[name]
		if !ok {
			problems = append(problems, fmt.Sprintf("wire.%s has no component", name))
			continue
		}
		problems = append(problems, compareStruct(name, flatten(doc, s), reflect.TypeOf(v), requests[name])...)
	}
	sort.Strings(problems)
	require.Empty(t, problems)
}

// flatten merges an allOf of components and inline objects into one
// object.
func flatten(doc openAPIDoc, s *schemaNode) *schemaNode {
	if len(s.AllOf) == 0 {
		return s
	}
	out := &schemaNode{Type: "object", Properties: map[string]*schemaNode{}}
	for _, part := range s.AllOf {
		if part.Ref != "" {
			part = doc.Components.Schemas[strings.TrimPrefix(part.Ref, "#/components/schemas/")]
		}
		part = flatten(doc, part)
		maps.Copy(out.Properties, part.Properties)
		out.Required = append(out.Required, part.Required...)
	}
	return out
}

// jsonFields returns a struct's JSON fields (embedded structs flattened).
func jsonFields(t reflect.Type) []reflect.StructField {
	var out []reflect.StructField
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		if f.Anonymous && tag == "" && f.Type.Kind() == reflect.Struct {
			out = append(out, jsonFields(f.Type)...)
			continue
		}
		out = append(out, f)
	}
	return out
}

// jsonName returns a field's JSON name and whether it is left out when
// empty or sent as a string.
func jsonName(f reflect.StructField) (name string, omitempty, quoted bool) {
	name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
	if name == "" {
		name = f.Name
	}
	for o := range strings.SplitSeq(opts, ",") {
		omitempty = omitempty || o == "omitempty" || o == "omitzero"
		quoted = quoted || o == "string"
	}
	return name, omitempty, quoted
}

func compareStruct(where string, s *schemaNode, t reflect.Type, request bool) []string {
	var problems []string
	if s.Type != "object" {
		return []string{fmt.Sprintf("%s: type %q, want object", where, s.Type)}
	}
	seen := map[string]bool{}
	var required []string
	for _, f := range jsonFields(t) {
		name, omit, quoted := jsonName(f)
		seen[name] = true
		at := where + "." + name
		p, ok := s.Properties[name]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s: sent, not in the document", at))
			continue
		}
		if !omit {
			required = append(required, name)
		}
		if quoted {
			if p.Type != "string" {
				problems = append(problems, fmt.Sprintf("%s: sent as a string, documented %q", at, p.Type))
			}
			continue
		}
		problems = append(problems, compareType(at, p, f.Type, omit, request)...)
	}
	for name := range s.Properties {
		if !seen[name] {
			problems = append(problems, fmt.Sprintf("%s.%s: in the document, not in wire", where, name))
		}
	}
	sort.Strings(required)
	got := slices.Clone(s.Required)
	sort.Strings(got)
	if request {
		for _, name := range got {
			if !seen[name] {
				problems = append(problems, fmt.Sprintf("%s: requires %s, which it does not have", where, name))
			}
		}
		return problems
	}
	if !slices.Equal(required, got) {
		problems = append(problems, fmt.Sprintf("%s: required %v, want %v", where, got, required))
	}
	return problems
}

var (
	timeType = reflect.TypeFor[time.Time]()
	rawType  = reflect.TypeFor[json.RawMessage]()
	durType  = reflect.TypeFor[time.Duration]()
)

func compareType(at string, s *schemaNode, t reflect.Type, omit, request bool) []string {
	if s.Ref != "" {
		return nil // a component: compared on its own
	}
	nullable := false
	if t.Kind() == reflect.Pointer {
		t, nullable = t.Elem(), !omit
	}
	if nullable && !s.Nullable && !request {
		return []string{fmt.Sprintf("%s: may be null, not nullable in the document", at)}
	}
	want := ""
	switch {
	case t == timeType:
		if s.Type != "string" || s.Format != "date-time" {
			return []string{fmt.Sprintf("%s: a time, documented %s/%s", at, s.Type, s.Format)}
		}
		return nil
	case t == rawType:
		return nil // any JSON
	case t == durType:
		want = "integer"
	case t.Kind() == reflect.String:
		want = "string"
	case t.Kind() == reflect.Bool:
		want = "boolean"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		want = "integer"
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		want = "number"
	case t.Kind() == reflect.Slice:
		if s.Type != "array" {
			return []string{fmt.Sprintf("%s: a list, documented %q", at, s.Type)}
		}
		if s.Items == nil {
			return []string{fmt.Sprintf("%s: a list without items", at)}
		}
		return compareType(at+"[]", s.Items, t.Elem(), true, request)
	case t.Kind() == reflect.Map:
		want = "object"
	case t.Kind() == reflect.Struct:
		if s.Properties == nil {
			return nil
		}
		return compareStruct(at, s, t, request)
	case t.Kind() == reflect.Interface:
		return nil
	}
	if s.Type != want {
		return []string{fmt.Sprintf("%s: %s in Go, documented %q", at, t, s.Type)}
	}
	return nil
}

// requestOnly returns the components only request bodies use.
func requestOnly(t *testing.T) map[string]bool {
	t.Helper()
	data, err := os.ReadFile("openapi.json")
	require.NoError(t, err)
	var doc struct {
		Paths map[string]map[string]struct {
			RequestBody json.RawMessage `json:"requestBody"`
			Responses   json.RawMessage `json:"responses"`
		} `json:"paths"`
		Components struct {
			Schemas map[string]json.RawMessage `json:"schemas"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal(data, &doc))
	var walk func(raw json.RawMessage, seen map[string]bool)
	walk = func(raw json.RawMessage, seen map[string]bool) {
		for _, m := range refPattern.FindAllSubmatch(raw, -1) {
			name := string(m[1])
			if !seen[name] {
				seen[name] = true
				walk(doc.Components.Schemas[name], seen)
			}
		}
	}
	sent, answered := map[string]bool{}, map[string]bool{}
	for _, ops := range doc.Paths {
		for _, op := range ops {
			walk(op.RequestBody, sent)
			walk(op.Responses, answered)
		}
	}
	out := map[string]bool{}
	for name := range sent {
		out[name] = !answered[name]
	}
	return out
}

var refPattern = regexp.MustCompile(`"#/components/schemas/([A-Za-z]+)"`)

// TestOpenAPIEnums checks the document's enums against the values the
// code has: states, step kinds, event types and error codes.
func TestOpenAPIEnums(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t)
	tasks := strs(state.Tasks)
	final := slices.DeleteFunc(slices.Clone(tasks), func(s string) bool { return !state.Task(s).Terminal() })
	kinds := []string{store.KindDecision, store.KindBatch, store.KindItem, store.KindSignal, store.KindWorkflow, store.KindFunction, store.KindCall}
	tests := []struct {
		at   string // Component.property, [] for a list's items
		want []string
	}{
		{"Task.state", tasks},
		{"Step.state", strs(state.Steps)},
		{"TaskFilter.state", tasks},
		{"PruneRequest.state", final},
		{"RetentionSetting.state", final},
		{"Step.kind", kinds},
		{"Event.type", weft.EventTypes},
		{"CreateWebhook.types[]", weft.EventTypes},
		{"Webhook.types[]", weft.EventTypes},
		{"Error.code", errorCodes(t)},
	}
	for _, tt := range tests {
		t.Run(tt.at, func(t *testing.T) {
			t.Parallel()
			name, rest, _ := strings.Cut(tt.at, ".")
			s := doc.Components.Schemas[name]
			require.NotNil(t, s, "component %s", name)
			prop, items := strings.CutSuffix(rest, "[]")
			s = s.Properties[prop]
			require.NotNil(t, s, "%s has no property %s", name, prop)
			if items {
				s = s.Items
			}
			var got []string
			for _, v := range s.Enum {
				got = append(got, fmt.Sprint(v))
			}
			require.ElementsMatch(t, tt.want, got)
		})
	}
}

func strs[S ~string](in []S) []string {
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = string(s)
	}
	return out
}

// errorCodes returns the values of wire's Code constants.
func errorCodes(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "../wire/wire.go", nil, 0)
	require.NoError(t, err)
	var codes []string
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && strings.HasPrefix(n.Name, "Code") {
					v, err := strconv.Unquote(lit.Value)
					require.NoError(t, err)
					codes = append(codes, v)
				}
			}
		}
	}
	require.NotEmpty(t, codes)
	return codes
}

// TestPermissionsDocumented: docs/api.md names every permission the server
// checks, and no other.
func TestPermissionsDocumented(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../docs/api.md")
	require.NoError(t, err)
	_, rest, ok := strings.Cut(string(data), "Permissions are `resource:action`:")
	require.True(t, ok, "docs/api.md lists the permissions after \"Permissions are `resource:action`:\"")
	para, _, _ := strings.Cut(rest, "`resource:*`")
	var documented []string
	for _, m := range regexp.MustCompile("`([a-z]+:[a-z]+)`").FindAllStringSubmatch(para, -1) {
		documented = append(documented, m[1])
	}
	want := slices.DeleteFunc(slices.Clone(server.Permissions), func(p string) bool { return p == server.PermAdmin })
	require.ElementsMatch(t, want, documented)
}
