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

// record fills a storage record and returns what the API sends for it.
func record[S any](conv func(S) any) func() any {
	return func() any {
		var s S
		fill(&s)
		return conv(s)
	}
}

func same[S any](s S) any { return s }

// records are the storage records the API, the event stream, webhooks and
// the CLI's --json send, by golden file.
var records = map[string]func() any{
	"task":                 record(same[store.Task]),
	"step":                 record(same[store.Step]),
	"audit_entry":          record(same[store.AuditEntry]),
	"event":                record(same[store.HistoryEvent]),
	"webhook":              record(same[store.Webhook]),
	"breaker":              record(same[store.Breaker]),
	"schedule":             record(same[store.ScheduleRecord]),
	"schedule_audit_entry": record(same[store.ScheduleAuditEntry]),
	"policy":               record(same[store.Policy]),
	"policy_report":        record(same[store.PolicyReport]),
	"policy_change":        record(same[store.PolicyChangeRecord]),
	"retention":            record(same[store.Retention]),
	"operator_entry":       record(same[store.OperatorEntry]),
	"archived_task":        record(same[store.ArchivedTask]),
	"api_key":              record(same[store.APIKey]),
}

// TestRecordsJSON pins the JSON of every record: a storage record with
// every field set, converted to its wire type, marshals to the golden
// bytes (run with -update to rewrite them, on purpose only).
func TestRecordsJSON(t *testing.T) {
	t.Parallel()
	for name, make := range records {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := json.Marshal(make())
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
