package wire_test

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/wire"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// fill sets every exported field of the value v points to, recursively, to
// a value that is not zero, so that no field can go missing from the JSON
// unnoticed. Strings name their field, numbers count up, RawMessages are
// a small JSON object.
func fill(v any) {
	n := 0
	fillValue(reflect.ValueOf(v).Elem(), "", &n)
}

var (
	rawType  = reflect.TypeOf(json.RawMessage(nil))
	timeType = reflect.TypeOf(time.Time{})
)

func fillValue(v reflect.Value, name string, n *int) {
	*n++
	switch {
	case v.Type() == rawType:
		v.SetBytes([]byte(`{"` + name + `":1}`))
		return
	case v.Type() == timeType:
		v.Set(reflect.ValueOf(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).Add(time.Duration(*n) * time.Minute)))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(name)
	case reflect.Uint8:
		v.SetUint(uint64(*n % 256))
	case reflect.Int, reflect.Int64, reflect.Int32:
		v.SetInt(int64(*n))
	case reflect.Float64:
		v.SetFloat(float64(*n) / 100)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fillValue(v.Elem(), name, n)
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fillValue(v.Index(0), name, n)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fillValue(k, name+"_key", n)
		fillValue(e, name, n)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if f := v.Type().Field(i); f.IsExported() {
				fillValue(v.Field(i), f.Name, n)
			}
		}
	default:
		panic("fill: unhandled kind " + v.Kind().String() + " of " + name)
	}
}

// rec is a storage record and its wire form.
type rec struct {
	make          func() any // fills a storage record and converts it
	stored, wired reflect.Type
}

func record[S, W any](of func(S) W) rec {
	return rec{
		make: func() any {
			var s S
			fill(&s)
			return of(s)
		},
		stored: reflect.TypeFor[S](), wired: reflect.TypeFor[W](),
	}
}

// records are the storage records the API, the event stream, webhooks and
// the CLI's --json send, by golden file.
var records = map[string]rec{
	"task":                 record(wire.TaskOf),
	"step":                 record(wire.StepOf),
	"audit_entry":          record(wire.AuditEntryOf),
	"event":                record(wire.EventOf),
	"webhook":              record(wire.WebhookOf),
	"breaker":              record(wire.BreakerOf),
	"schedule":             record(wire.ScheduleOf),
	"schedule_audit_entry": record(wire.ScheduleAuditEntryOf),
	"policy":               record(wire.PolicyOf),
	"policy_report":        record(wire.PolicyReportOf),
	"policy_change":        record(wire.PolicyChangeRecordOf),
	"retention":            record(wire.RetentionSettingOf),
	"operator_entry":       record(wire.OperatorEntryOf),
	"archived_task":        record(wire.ArchivedTaskOf),
	"api_key":              record(wire.APIKeyOf),
}

// omitted are the fields of storage records the API leaves out on purpose.
var omitted = map[string]bool{
	"APIKey.Hash": true, // a key's secret hash is never shown
	// A task's trace context reaches its steps and workers, not the API's
	// readers.
	"Task.TraceParent": true,
	"Task.TraceState":  true,
}

// TestRecordsCoverStorage fails when a storage record gains a field its
// wire form does not have: add it to the wire type and its Of function
// (and to the API's docs), or to omitted if the API leaves it out.
func TestRecordsCoverStorage(t *testing.T) {
	t.Parallel()
	for name, r := range records {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for i := 0; i < r.stored.NumField(); i++ {
				f := r.stored.Field(i)
				key := r.stored.Name() + "." + f.Name
				if !f.IsExported() || omitted[key] {
					continue
				}
				_, ok := r.wired.FieldByName(f.Name)
				require.True(t, ok, "%s has no field in wire.%s", key, r.wired.Name())
			}
		})
	}
}

// TestRecordsJSON pins the JSON of every record: a storage record with
// every field set, converted to its wire type, marshals to the golden
// bytes (run with -update to rewrite them, on purpose only).
func TestRecordsJSON(t *testing.T) {
	t.Parallel()
	for name, r := range records {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := json.Marshal(r.make())
			require.NoError(t, err)
			path := filepath.Join("testdata", name+".json")
			if *update {
				require.NoError(t, os.WriteFile(path, append(got, '\n'), 0o644))
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err)
			require.Equal(t, string(want), string(got)+"\n")
		})
	}
}

func TestRateJSON(t *testing.T) {
	t.Parallel()
	b, err := json.Marshal(wire.PolicyOf(store.Policy{Target: "shop", Rate: &store.Rate{Limit: 50, Per: time.Second}}))
	require.NoError(t, err)
	require.Contains(t, string(b), `"rate":"50/s"`)
	var p wire.Policy
	require.NoError(t, json.Unmarshal(b, &p))
	require.Equal(t, &store.Rate{Limit: 50, Per: time.Second}, p.Rate)
	require.Error(t, json.Unmarshal([]byte(`{"rate":"fast"}`), &p))
}
