// Command weft runs and inspects weft workflows from the command line.
//
//	weft run FILE.yaml            submit one task and drive it to its end with live progress
//	weft submit FILE.yaml|NS/NAME submit a task and print its id
//	weft worker                   run an engine until signalled, resuming unfinished work
//	weft tasks                    list tasks
//	weft task ID                  show a task and its steps
//	weft cancel ID, weft retry ID cancel a task, retry a failed one
//	weft validate FILE.yaml...    check templates
//	weft serve                    run an engine with the REST API, metrics and remote workers
//	weft keys create|list|revoke  manage the API keys of weft serve
//
// The database is chosen by --db, else $WEFT_DB, else ./weft.db. With
// --server URL (or $WEFT_SERVER) and --token (or $WEFT_TOKEN), submit, tasks,
// task, cancel, retry and validate talk to a weft server instead. Exit status:
// 0 on success, 1 when a task failed or a command could not be done, 2 for
// usage and validation errors, 130 when `weft run` was interrupted.
package main

import (
	"context"
	"io"
	"os"
)

func main() {
	// Signals are handled for the whole life of the process (signals.go):
	// the first interrupts the command; a later one never ends a process
	// whose engine still drains.
	ctx, sigs := watchSignals()
	a := newApp(os.Stdin, os.Stdout, os.Stderr, os.Getenv)
	a.signals = sigs
	os.Exit(a.execute(ctx, os.Args[1:]))
}

// run executes the command line args and returns the exit status. A
// cancelled ctx is an interrupt (SIGINT or SIGTERM).
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return newApp(stdin, stdout, stderr, os.Getenv).execute(ctx, args)
}
