package model

import (
	"fmt"
	"strings"
	"time"
)

// stepScript is the command of every exec step: it appends its start and
// end to the ledger ($1), works for $2 seconds, then ends as $3 says: fail
// (every attempt), fail1 (the first attempt), split (a batch of three
// items), or completes.
const stepScript = `l=$1
echo "start $WEFT_TASK_ID $(echo "$WEFT_STEP" | tr ' ' _) $WEFT_ATTEMPT $$ $PPID" >> "$l"
sleep "$2"
echo "end $WEFT_TASK_ID $(echo "$WEFT_STEP" | tr ' ' _) $WEFT_ATTEMPT $$ $PPID" >> "$l"
case "$3" in
fail) echo "fails on purpose" >&2; exit 1 ;;
fail1) if [ "$WEFT_ATTEMPT" = 1 ]; then echo "first attempt fails on purpose" >&2; exit 1; fi ;;
split) printf '{"batches": [1, 2, 3]}\n'; exit 0 ;;
esac
printf '{"ok": true}\n'
`

// The namespaces of the model's workflows: operator actions on namespaces
// (pause, limits) pick one of them.
var namespaces = []string{"ma", "mb"}

// Workflow names by submit operation.
var submitWorkflow = map[string]string{
	OpSubmitPlain:     "ma/plain",
	OpSubmitDAG:       "ma/dag",
	OpSubmitFlaky:     "ma/flaky",
	OpSubmitLong:      "mc/long", // a namespace of its own: never paused or limited
	OpSubmitKeyed:     "ma/plain",
	OpSubmitSupersede: "ma/plain",
	OpSubmitSignal:    "mb/sig",
	OpSubmitSignalTO:  "mb/sigto",
	OpSubmitChild:     "mb/child",
	OpSubmitBatch:     "mb/batch",
	OpSubmitRemote:    "mb/remote",
}

// templates returns the model's workflow templates by file name.
func templates(script, ledger string, lease time.Duration) map[string]string {
	long := longStep(lease)
	cmd := func(secs, mode string) string {
		return fmt.Sprintf(`{command: ["/bin/sh", %q, %q, %q, %q]}`, script, ledger, secs, mode)
	}
	f := func(s string) string { return strings.ReplaceAll(s, "\t", "  ") }
	return map[string]string{
		"plain": f(`namespace: ma
name: plain
version: "1"
steps:
	- name: s
		handler: exec
		config: ` + cmd("0.05", "") + `
`),
		"dag": f(`namespace: ma
name: dag
version: "1"
steps:
	- name: a
		handler: exec
		config: ` + cmd("0.05", "") + `
	- name: b
		handler: exec
		depends_on: [a]
		config: ` + cmd("0.1", "") + `
	- name: c
		handler: exec
		depends_on: [a]
		retry: {max_attempts: 2, backoff: fixed, initial: 200ms}
		config: ` + cmd("0.05", "fail1") + `
	- name: d
		handler: exec
		depends_on: [b, c]
		config: ` + cmd("0.05", "") + `
`),
		"flaky": f(`namespace: ma
name: flaky
version: "1"
steps:
	- name: s
		handler: exec
		retry: {max_attempts: 1}
		config: ` + cmd("0.05", "fail") + `
`),
		"long": f(`namespace: mc
name: long
version: "1"
steps:
	- name: s
		handler: exec
		retry: {max_attempts: 5, backoff: fixed, initial: 100ms}
		config: ` + cmd(fmt.Sprintf("%.1f", long.Seconds()), "") + `
`),
		"sig": f(`namespace: mb
name: sig
version: "1"
steps:
	- name: a
		handler: exec
		config: ` + cmd("0.05", "") + `
	- name: w
		type: signal
		signal: {name: go, timeout: 1h}
		depends_on: [a]
	- name: z
		handler: exec
		depends_on: [w]
		config: ` + cmd("0.05", "") + `
`),
		"sigto": f(`namespace: mb
name: sigto
version: "1"
steps:
	- name: w
		type: signal
		signal: {name: go, timeout: 300ms}
	- name: z
		handler: exec
		depends_on: [w]
		config: ` + cmd("0.05", "") + `
`),
		"child": f(`namespace: mb
name: child
version: "1"
steps:
	- name: c
		type: workflow
		workflow: ma/plain
`),
		"batch": f(`namespace: mb
name: batch
version: "1"
templates:
	- name: item
		handler: exec
		config: ` + cmd("0.05", "") + `
steps:
	- name: split
		type: batch
		worker: item
		handler: exec
		config: ` + cmd("0.02", "split") + `
`),
		"remote": f(`namespace: mb
name: remote
version: "1"
steps:
	- name: r
		handler: remote.work
		retry: {max_attempts: 10, backoff: fixed, initial: 100ms}
	- name: z
		handler: exec
		depends_on: [r]
		config: ` + cmd("0.05", "") + `
`),
		"tick": f(`namespace: mb
name: tick
version: "1"
schedules:
	- name: every
		cron: "@every 3s"
steps:
	- name: s
		handler: exec
		config: ` + cmd("0.02", "") + `
`),
	}
}
