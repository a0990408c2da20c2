package chaos

// The workload: the command of every exec step, and the chaos/mix
// workflow most tasks run (chaos/long: rolling.go; chaos/remote: serve.go).

// stepScript is the command of every exec step: it appends "TASK STEP ATTEMPT
// PID" (PID: the worker running it) to the ledger ($1) when it starts and
// the same with "end" when it exits (not when it is killed), and works in
// between. a fails its first attempt on purpose (a retry); split is the
// batch step (three items); the items work 0.2-0.6 s; long (the rolling
// restarts' work) works $2 seconds, longer than the workers' lease; d reads
// its context.
const stepScript = `echo "$WEFT_TASK_ID $WEFT_STEP $WEFT_ATTEMPT $PPID" >> "$1"
trap 'echo "$WEFT_TASK_ID $WEFT_STEP $WEFT_ATTEMPT $PPID end" >> "$1"' EXIT
case $WEFT_STEP in
a)
	if [ "$WEFT_ATTEMPT" = 1 ]; then echo "first attempt fails on purpose" >&2; exit 1; fi
	sleep 0.1 ;;
split) printf '{"batches": [1, 2, 3]}\n'; exit 0 ;;
d) cat >/dev/null ;;
long) sleep "$2" ;;
*) sleep "0.$((2 + WEFT_TASK_ID % 5))" ;;
esac
printf '{"step": "%s", "task": %s}\n' "$WEFT_STEP" "$WEFT_TASK_ID"
`

// template is the chaos/mix workflow: a (a retry), then the batch split
// and the signal wait approve, then d.
const template = `namespace: chaos
name: mix
version: "1"
templates:
  - name: item
    handler: exec
    retry: {max_attempts: 20, backoff: fixed, initial: 20ms}
    config: {command: ["/bin/sh", %[1]q, %[2]q]}
steps:
  - name: a
    handler: exec
    retry: {max_attempts: 20, backoff: fixed, initial: 20ms}
    config: {command: ["/bin/sh", %[1]q, %[2]q]}
  - name: split
    type: batch
    worker: item
    handler: exec
    depends_on: [a]
    retry: {max_attempts: 20, backoff: fixed, initial: 20ms}
    config: {command: ["/bin/sh", %[1]q, %[2]q]}
  - name: approve
    type: signal
    signal: {name: go, timeout: 30m}
    depends_on: [a]
  - name: d
    handler: exec
    depends_on: [split, approve]
    priority: 1
    retry: {max_attempts: 20, backoff: fixed, initial: 20ms}
    config: {command: ["/bin/sh", %[1]q, %[2]q]}
`
