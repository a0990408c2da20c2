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
	OpSubmitFunction:  "mb/fn",
}

// templates returns the model's workflow templates by file name.
func templates(script, ledger string, lease time.Duration) map[string]string {
	// run is an exec step's config: the step script works secs seconds
	// and ends as mode says.
	run := func(secs, mode string) string {
		return fmt.Sprintf(`config: {command: ["/bin/sh", %q, %q, %q, %q]}`, script, ledger, secs, mode)
	}
	exec := func(name, secs, mode string, fields ...string) string {
		return step(name, append(append([]string{"handler: exec"}, fields...), run(secs, mode))...)
	}
	long := fmt.Sprintf("%.1f", longStep(lease).Seconds())
	return map[string]string{
		"plain": workflow("ma", "plain", "", exec("s", "0.05", "")),
		"dag": workflow("ma", "dag", "",
			exec("a", "0.05", ""),
			exec("b", "0.1", "", "depends_on: [a]"),
			exec("c", "0.05", "fail1", "depends_on: [a]", "retry: {max_attempts: 2, backoff: fixed, initial: 200ms}"),
			exec("d", "0.05", "", "depends_on: [b, c]")),
		"flaky": workflow("ma", "flaky", "", exec("s", "0.05", "fail", "retry: {max_attempts: 1}")),
		"long":  workflow("mc", "long", "", exec("s", long, "", "retry: {max_attempts: 5, backoff: fixed, initial: 100ms}")),
		"sig": workflow("mb", "sig", "",
			exec("a", "0.05", ""),
			step("w", "type: signal", "signal: {name: go, timeout: 1h}", "depends_on: [a]"),
			exec("z", "0.05", "", "depends_on: [w]")),
		"sigto": workflow("mb", "sigto", "",
			step("w", "type: signal", "signal: {name: go, timeout: 300ms}"),
			exec("z", "0.05", "", "depends_on: [w]")),
		"child": workflow("mb", "child", "", step("c", "type: workflow", "workflow: ma/plain")),
		"batch": workflow("mb", "batch", "templates:\n"+exec("item", "0.05", ""),
			exec("split", "0.02", "split", "type: batch", "worker: item")),
		"remote": workflow("mb", "remote", "",
			step("r", "handler: remote.work", "retry: {max_attempts: 10, backoff: fixed, initial: 100ms}"),
			exec("z", "0.05", "", "depends_on: [r]")),
		"fn":   workflow("mb", "fn", "", step("function", "type: function", "handler: remote.work")),
		"tick": workflow("mb", "tick", "schedules:\n"+step("every", `cron: "@every 3s"`), exec("s", "0.02", "")),
	}
}

// workflow is a template: its head (templates, schedules), then its steps.
func workflow(namespace, name, head string, steps ...string) string {
	return fmt.Sprintf("namespace: %s\nname: %s\nversion: \"1\"\n%ssteps:\n%s", namespace, name, head, strings.Join(steps, ""))
}

// step is one entry of a list of steps (or templates, or schedules).
func step(name string, fields ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  - name: %s\n", name)
	for _, f := range fields {
		fmt.Fprintf(&b, "    %s\n", f)
	}
	return b.String()
}
